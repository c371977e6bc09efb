// exponential-backoff 3.1.3 around a function that makes a NEW Idempotency-Key each time it is
// called: `backOff` calls `request()` again for every attempt (dist/backoff.js:79-82), so a lost
// response is retried as a new order. Expected: key_stability fail, duplicates fail.
import { fleet, lib, newKey, postOrThrow, transient } from './fleet.mjs';
const eb = await lib('exponential-backoff');
const backOff = eb.backOff ?? eb.default.backOff;

await fleet((i) => backOff(() => postOrThrow(i, newKey()), {
  numOfAttempts: 3, startingDelay: 50, jitter: 'full', retry: (e) => transient(e),
}), 20);
