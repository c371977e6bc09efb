// exponential-backoff 3.1.3 with its default `retry` (`function () { return true; }`,
// dist/options.js:19) around `if (!res.ok) throw`: every error is retried, a 400 too.
// Expected: retry_on_4xx fail.
import { fleet, lib, newKey, postOrThrow } from './fleet.mjs';
const eb = await lib('exponential-backoff');
const backOff = eb.backOff ?? eb.default.backOff;

await fleet((i) => {
  const key = newKey();
  return backOff(() => postOrThrow(i, key), { numOfAttempts: 3, startingDelay: 50, jitter: 'full' });
}, 20);
