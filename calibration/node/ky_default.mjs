// ky 1.14.2 with its default retry: limit 2, methods get/put/head/delete/options/trace — POST is not
// among them, so a POST is never retried. Expected: no retries at all (jitter inconclusive,
// key_stability inconclusive).
import { fleet, headers, body, lib, newKey, URL_ORDERS } from './fleet.mjs';
const { default: ky } = await lib('ky');

await fleet((i) => ky.post(URL_ORDERS, { headers: headers(i, newKey()), body: body(i) }));
