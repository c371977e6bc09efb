// p-retry 7.1.1 with `minTimeout: 0`: retry at once (delay 0 * factor^n = 0), 50 clients on one event
// loop — the Node twin of the zero-delay asyncio loop. Expected: jitter fail (immediate retries).
import { fleet, lib, newKey, postOrThrow, transient } from './fleet.mjs';
const { default: pRetry, AbortError } = await lib('p-retry');

await fleet((i) => {
  const key = newKey();
  return pRetry(async () => {
    try { return await postOrThrow(i, key); } catch (e) { throw transient(e) ? e : new AbortError(e); }
  }, { retries: 3, minTimeout: 0 });
}, 50);
