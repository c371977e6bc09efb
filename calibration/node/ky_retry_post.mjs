// ky 1.14.2 with retry enabled for POST (`methods: ['post']`), otherwise defaults: limit 2, delay
// 0.3 s * 2^(n-1), `jitter` undefined (no jitter), statusCodes incl. 503 but not 400, Retry-After
// honoured on 413/429/503. The Idempotency-Key header is the same on every attempt (ky re-sends the
// same request). Expected: jitter fail; retry_on_4xx pass (400 not retried); retry_after pass.
import { fleet, headers, body, lib, newKey, URL_ORDERS } from './fleet.mjs';
const { default: ky } = await lib('ky');

await fleet((i) => ky.post(URL_ORDERS, {
  headers: headers(i, newKey()), body: body(i), retry: { methods: ['post'] },
}));
