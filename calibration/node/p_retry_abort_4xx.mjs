// p-retry 7.1.1 with a 4xx turned into AbortError ("abort retrying"): the 400 is not retried.
// Expected: retry_on_4xx pass.
import { fleet, lib, newKey, postOrThrow, transient } from './fleet.mjs';
const { default: pRetry, AbortError } = await lib('p-retry');

await fleet((i) => {
  const key = newKey();
  return pRetry(async () => {
    try { return await postOrThrow(i, key); } catch (e) { throw transient(e) ? e : new AbortError(e); }
  }, { retries: 2, minTimeout: 50 });
}, 20);
