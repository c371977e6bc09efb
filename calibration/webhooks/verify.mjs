// Verifies deliveries made by the `webhooks` crate with the providers' own npm libraries.
//
//   node verify.mjs CASES.json
//
// The same cases and output lines as verify.py (see there): `standardwebhooks` and `svix` for
// Standard Webhooks, `@octokit/webhooks-methods` (`verify`) for GitHub. Neither Standard Webhooks
// library can turn its timestamp check off, so `lax` is null; `library_signature` compares the
// delivery's signature with the library's own `sign` at `signed_at`.
import { readFileSync } from 'node:fs';
import { lib } from './lib.mjs';

const cases = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const lower = (h) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]));

async function standardWebhooks(library, Webhook, c) {
  const headers = lower(c.headers);
  const out = { library, case: c.case, lax: null, library_signature: null };
  try {
    new Webhook(c.secret).verify(c.body, headers);
    Object.assign(out, { verified: true, error: null });
  } catch (e) {
    Object.assign(out, { verified: false, error: `${e.name}: ${e.message}` });
  }
  if (c.signed_at != null && headers['webhook-signature']) {
    const own = new Webhook(c.secret).sign(headers['webhook-id'], new Date(c.signed_at * 1000), c.body);
    out.library_signature = headers['webhook-signature'].split(' ').includes(own);
  }
  return out;
}

async function github(verify, c) {
  const headers = lower(c.headers);
  const out = { library: '@octokit/webhooks-methods', case: c.case, lax: null, library_signature: null };
  try {
    // verify() throws a TypeError when the signature is absent: that is a refusal too.
    const ok = await verify(c.secret, c.body, headers['x-hub-signature-256']);
    Object.assign(out, { verified: ok === true, error: ok ? null : 'signature does not match' });
  } catch (e) {
    Object.assign(out, { verified: false, error: `${e.name}: ${e.message}` });
  }
  return out;
}

const std = await lib('standardwebhooks');
const svix = await lib('svix');
const { verify } = await lib('@octokit/webhooks-methods');
for (const c of cases) {
  const results = [];
  if (c.style === 'standard-webhooks') {
    results.push(await standardWebhooks('standardwebhooks (npm)', std.Webhook, c));
    results.push(await standardWebhooks('svix (npm)', svix.Webhook, c));
  } else if (c.style === 'github') {
    results.push(await github(verify, c));
  }
  for (const r of results) console.log(JSON.stringify(r));
}
