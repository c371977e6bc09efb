// p-retry 7.1.1 with its default `randomize: false`: delay = minTimeout * factor^(attempt-1), the same
// for every client (minTimeout lowered from 1000 ms to 500 ms to keep the run short).
// Expected: jitter fail (no jitter).
import { fleet, lib, newKey, postOrThrow, transient } from './fleet.mjs';
const { default: pRetry, AbortError } = await lib('p-retry');

await fleet((i) => {
  const key = newKey();
  return pRetry(async () => {
    try { return await postOrThrow(i, key); } catch (e) { throw transient(e) ? e : new AbortError(e); }
  }, { retries: 3, minTimeout: 500 });
});
