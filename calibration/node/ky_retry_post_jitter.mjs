// ky 1.14.2 with retry for POST and `jitter: true` (full jitter: Math.random() * delay).
// Expected: jitter pass.
import { fleet, headers, body, lib, newKey, URL_ORDERS } from './fleet.mjs';
const { default: ky } = await lib('ky');

await fleet((i) => ky.post(URL_ORDERS, {
  headers: headers(i, newKey()), body: body(i), retry: { methods: ['post'], jitter: true },
}));
