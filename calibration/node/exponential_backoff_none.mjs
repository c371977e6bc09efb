// exponential-backoff 3.1.3 with `jitter: "none"` (its default): startingDelay 500 ms (default 100 ms), timeMultiple 2,
// the first attempt not delayed. Expected: jitter fail.
import { fleet, lib, newKey, postOrThrow, transient } from './fleet.mjs';
const eb = await lib('exponential-backoff');
const backOff = eb.backOff ?? eb.default.backOff;

await fleet((i) => {
  const key = newKey();
  return backOff(() => postOrThrow(i, key), { numOfAttempts: 4, startingDelay: 500, jitter: 'none', retry: (e) => transient(e) });
});
