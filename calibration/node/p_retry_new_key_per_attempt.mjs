// p-retry 7.1.1 around a function that makes a NEW Idempotency-Key each time it is called: p-retry
// calls the function again for every attempt (`await input(attemptNumber)`, index.js:197), so a
// lost response (processed, answer dropped: undici's "fetch failed", a network TypeError that
// p-retry retries, index.js:106) is retried as a new order. Expected: key_stability fail,
// duplicates fail.
import { fleet, lib, newKey, postOrThrow } from './fleet.mjs';
const { default: pRetry } = await lib('p-retry');

await fleet((i) => pRetry(() => postOrThrow(i, newKey()), { retries: 2, minTimeout: 50 }), 20);
