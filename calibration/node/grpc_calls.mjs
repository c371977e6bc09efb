// Shared by the gRPC calibration scripts: N calls of orders.v1.Orders/CreateOrder made with
// @grpc/grpc-js (loaded from proto/orders/v1/orders.proto by @grpc/proto-loader), under the service
// config the script gives, released together on one channel.
//
// Each call carries metadata `idempotency-key: <uuid>` (its `request_id` too) and `x-client-id: c<i>`,
// and a deadline of 10 s; the retry or hedging policy is grpc-js's own (the channel option
// `grpc.service_config`). Exits 0 whatever the calls' outcome (the harness judges the journal); a
// one-line summary goes to stderr.
//
// Env: HARNESS_FAULT_URL (set by `harness exec` and `harness conform`); the number of calls is
// HARNESS_CALLS (set by `harness conform`), else CALIB_CLIENTS, else the script's default; at most
// HARNESS_CONCURRENCY are in flight at once when it is set (else all of them).
import { basename } from 'node:path';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { calls, concurrency, lib, limited } from './fleet.mjs';

const grpc = await lib('@grpc/grpc-js');
const protoLoader = await lib('@grpc/proto-loader');
const PROTO_DIR = fileURLToPath(new URL('../../proto/', import.meta.url));

const definition = protoLoader.loadSync('orders/v1/orders.proto', {
  includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true,
});
const Orders = grpc.loadPackageDefinition(definition).orders.v1.Orders;

/** A service config naming orders.v1.Orders with one policy (retryPolicy or hedgingPolicy). */
export function methodConfig(policy) {
  return JSON.stringify({ methodConfig: [{ name: [{ service: 'orders.v1.Orders' }], ...policy }] });
}

export async function run(serviceConfig, defaultCalls = 8) {
  const n = calls(defaultCalls);
  const target = new URL(process.env.HARNESS_FAULT_URL).host;
  const options = serviceConfig ? { 'grpc.service_config': serviceConfig } : {};
  const client = new Orders(target, grpc.credentials.createInsecure(), options);
  const outcomes = await limited(n, concurrency(n), (i) => new Promise((resolve) => {
    const key = randomUUID();
    const metadata = new grpc.Metadata();
    metadata.set('idempotency-key', key);
    metadata.set('x-client-id', `c${i}`);
    const request = { request_id: key, sku: `sku-${i}`, qty: 1, amount: '100' };
    client.CreateOrder(request, metadata, { deadline: Date.now() + 10_000 }, (err) => {
      resolve(err ? grpc.status[err.code] ?? String(err.code) : 'OK');
    });
  }));
  client.close();
  const counts = {};
  for (const o of outcomes) counts[o] = (counts[o] ?? 0) + 1;
  process.stderr.write(`${basename(process.argv[1])}: ${n} calls: ${JSON.stringify(counts)}\n`);
  process.exit(0);
}
