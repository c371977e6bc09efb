// p-retry 7.1.1 around `if (!res.ok) throw`: p-retry retries every thrown error except AbortError
// (and TypeErrors that are not network errors), so a 400 is retried. Expected: retry_on_4xx fail.
import { fleet, lib, newKey, postOrThrow } from './fleet.mjs';
const { default: pRetry } = await lib('p-retry');

await fleet((i) => {
  const key = newKey();
  return pRetry(() => postOrThrow(i, key), { retries: 2, minTimeout: 50 });
}, 20);
