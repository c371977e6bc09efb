// p-retry 7.1.1 with `minTimeout: 0` and `retries: 1`: one retry, at once, 50 clients on one event
// loop. With a single retry there is no later attempt to compare with, so only the spread of this
// one retry wave can tell. Expected: jitter fail (the retries come back at the pace of handling).
import { fleet, lib, newKey, postOrThrow, transient } from './fleet.mjs';
const { default: pRetry, AbortError } = await lib('p-retry');

await fleet((i) => {
  const key = newKey();
  return pRetry(async () => {
    try { return await postOrThrow(i, key); } catch (e) { throw transient(e) ? e : new AbortError(e); }
  }, { retries: 1, minTimeout: 0 });
}, 50);
