// exponential-backoff 3.1.3 knows nothing of responses: a 503 with Retry-After: 1 is retried after
// its own 100 ms backoff. Expected: retry_after fail.
import { fleet, lib, newKey, postOrThrow, transient } from './fleet.mjs';
const eb = await lib('exponential-backoff');
const backOff = eb.backOff ?? eb.default.backOff;

await fleet((i) => {
  const key = newKey();
  return backOff(() => postOrThrow(i, key), { numOfAttempts: 3, jitter: 'full', retry: (e) => transient(e) });
}, 20);
