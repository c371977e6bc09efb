// Shared by the calibration fleet scripts: N clients on one Node event loop, released together
// (Promise.all after a common start). Each client does one logical operation — POST
// $HARNESS_FAULT_URL/orders with a JSON body, an Idempotency-Key and `x-client-id: c<i>` — under the
// retry of the library its script configures. Exits 0 whatever the outcome (the harness judges
// the journal); a one-line summary goes to stderr.
//
// The libraries are installed by calibration/install.sh into .cache/calibration/node (pinned by
// package.json + package-lock.json here); `lib(name)` imports them from there.
//
// Env: HARNESS_FAULT_URL (set by `harness exec` and `harness conform`); the fleet size is
// HARNESS_CALLS (set by `harness conform`), else CALIB_CLIENTS, else the script's default; at most
// HARNESS_CONCURRENCY operations run at once when it is set (else all of them).
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { randomUUID } from 'node:crypto';

export const URL_ORDERS = process.env.HARNESS_FAULT_URL.replace(/\/$/, '') + '/orders';
const MODULES = new URL('../../.cache/calibration/node/node_modules/', import.meta.url);

export async function lib(name) {
  const dir = new URL(`${name}/`, MODULES);
  const pkg = JSON.parse(readFileSync(new URL('package.json', dir), 'utf8'));
  const ex = pkg.exports?.['.'] ?? pkg.exports;
  const entry = (typeof ex === 'string' ? ex : ex?.import ?? ex?.default) ?? pkg.module ?? pkg.main ?? 'index.js';
  return import(new URL(entry, dir).href);
}

export const newKey = () => randomUUID();
export const body = (i) => JSON.stringify({ sku: `sku-${i}`, qty: 1 });
export const headers = (i, key) => ({ 'content-type': 'application/json', 'idempotency-key': key, 'x-client-id': `c${i}` });

export class HttpError extends Error {
  constructor(response) {
    super(`HTTP ${response.status}`);
    this.response = response;
    this.status = response.status;
  }
}

/** One attempt with fetch; the body is read so the connection is reused. */
export async function post(i, key) {
  const res = await fetch(URL_ORDERS, { method: 'POST', headers: headers(i, key), body: body(i) });
  await res.text();
  return res;
}

/** One attempt that throws HttpError on a 4xx/5xx (the usual `if (!res.ok) throw`). */
export async function postOrThrow(i, key) {
  const res = await post(i, key);
  if (!res.ok) throw new HttpError(res);
  return res;
}

export const transient = (e) => !(e instanceof HttpError) || e.status >= 500 || e.status === 429 || e.status === 408;

/** How many operations: HARNESS_CALLS, else CALIB_CLIENTS, else `defaultCalls`. */
export const calls = (defaultCalls) =>
  Number(process.env.HARNESS_CALLS || process.env.CALIB_CLIENTS || defaultCalls);

/** How many at once: HARNESS_CONCURRENCY when set (at least 1), else all `n`. */
export const concurrency = (n) => Math.max(1, Number(process.env.HARNESS_CONCURRENCY || n));

/** Runs `one(i)` for i < n, at most `atOnce` at a time; the results in order of i. */
export async function limited(n, atOnce, one) {
  const results = new Array(n);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(n, atOnce) }, async () => {
    while (next < n) {
      const i = next++;
      results[i] = await one(i);
    }
  }));
  return results;
}

export async function fleet(operation, defaultClients = 40) {
  const n = calls(defaultClients);
  const start = new Promise((resolve) => setTimeout(resolve, 100)); // the barrier
  const outcomes = await limited(n, concurrency(n), async (i) => {
    await start;
    try {
      const r = await operation(i);
      return String(r?.status ?? 'ok');
    } catch (e) {
      return e?.response?.status ? `HTTP ${e.response.status}` : (e?.name ?? 'error');
    }
  });
  const counts = {};
  for (const o of outcomes) counts[o] = (counts[o] ?? 0) + 1;
  console.error(`${basename(process.argv[1])}: ${n} clients: ${JSON.stringify(counts)}`);
  process.exit(0);
}
