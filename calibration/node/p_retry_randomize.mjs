// p-retry 7.1.1 with `randomize: true`: delay = (1 + random) * minTimeout * factor^(attempt-1), i.e.
// U(1, 2) times the backoff. Expected: jitter pass (MAD/median of U(d, 2d) ≈ 0.167 ≥ 0.1).
// 120 clients, not the usual 40: 0.167 is near the 0.1 line, and the MAD of 40 draws from
// U(d, 2d) falls below it in about 1 run of 100 (10,000 simulated runs); of 120, in none.
import { fleet, lib, newKey, postOrThrow, transient } from './fleet.mjs';
const { default: pRetry, AbortError } = await lib('p-retry');

await fleet((i) => {
  const key = newKey();
  return pRetry(async () => {
    try { return await postOrThrow(i, key); } catch (e) { throw transient(e) ? e : new AbortError(e); }
  }, { retries: 3, minTimeout: 500, randomize: true });
}, 120);
