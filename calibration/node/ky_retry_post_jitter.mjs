// ky 1.14.2 with retry for POST and `jitter: true` (full jitter: Math.random() * delay,
// core/Ky.js:216-217), on a 500 ms base (`delay: 0.5 s * 2^(n-1)`; ky's default is 0.3 s).
// With ky's default base, full jitter spreads the first retries over 300 ms, 83% of them within
// one 250 ms window: at the edge of the wave rule (90%), pass or weak by a few ms of handling
// (calibration/RESULTS.md). Expected: jitter pass.
import { fleet, headers, body, lib, newKey, URL_ORDERS } from './fleet.mjs';
const { default: ky } = await lib('ky');

await fleet((i) => ky.post(URL_ORDERS, {
  headers: headers(i, newKey()), body: body(i),
  retry: { methods: ['post'], jitter: true, delay: (n) => 500 * 2 ** (n - 1) },
}));
