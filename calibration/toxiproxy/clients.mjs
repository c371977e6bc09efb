// Toxiproxy's Node client (toxiproxy-node-client) against the fault server's Toxiproxy API, each
// toxic shown on a real Redis client's (ioredis) and a real PostgreSQL client's (pg) connection
// through the proxies it makes.
//
// Environment: TOXIPROXY_URL (the API, http://host:port), REDIS_ADDR (host:port of a real Redis),
// PG_URL (postgres://user:password@host:port/db), CLIENTS_NODE_DIR (where install.sh put the
// node_modules: .cache/toxiproxy/node). Prints `ok NAME` or `FAIL NAME: why` per case;
// exits 1 when any failed. Every bound on time is a lower bound: what a toxic adds, never a speed.
import { createRequire } from "node:module";
import net from "node:net";

const require = createRequire(`${process.env.CLIENTS_NODE_DIR}/package.json`);
const Toxiproxy = require("toxiproxy-node-client").Toxiproxy;
const Redis = require("ioredis");
const pg = require("pg");

const failures = [];
async function test(name, f) {
  try {
    await f();
    console.log(`ok ${name}`);
  } catch (e) {
    failures.push(name);
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}
function assert(cond, what) {
  if (!cond) throw new Error(`assertion failed: ${what}`);
}
async function timed(f) {
  const t = performance.now();
  const out = await f();
  return [out, (performance.now() - t) / 1000];
}
async function rejects(f) {
  try {
    await f();
  } catch (e) {
    return e;
  }
  throw new Error("expected an error, got an answer");
}
function hostPort(addr) {
  const i = addr.lastIndexOf(":");
  return [addr.slice(0, i).replace(/^\[|\]$/g, ""), Number(addr.slice(i + 1))];
}

const toxiproxy = new Toxiproxy(process.env.TOXIPROXY_URL);
await toxiproxy.reset();
for (const p of Object.values(await toxiproxy.getAll())) await p.remove();

const redisProxy = await toxiproxy.createProxy({
  name: "node_redis",
  listen: "127.0.0.1:0",
  upstream: process.env.REDIS_ADDR,
});
const [rHost, rPort] = hostPort(redisProxy.listen);
const pgUrl = new URL(process.env.PG_URL);
const pgProxy = await toxiproxy.createProxy({
  name: "node_pg",
  listen: "127.0.0.1:0",
  upstream: `${pgUrl.hostname}:${pgUrl.port}`,
});
const [pHost, pPort] = hostPort(pgProxy.listen);

// No retries, no reconnects, no offline queue: a toxic's error must reach the test.
function redis() {
  return new Redis({
    host: rHost,
    port: rPort,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: true,
    retryStrategy: () => null,
    lazyConnect: true,
  }).on("error", () => {});
}
async function pgClient() {
  const c = new pg.Client({
    host: pHost,
    port: pPort,
    user: decodeURIComponent(pgUrl.username),
    password: decodeURIComponent(pgUrl.password),
    database: pgUrl.pathname.slice(1),
    connectionTimeoutMillis: 10000,
  });
  c.on("error", () => {});
  await c.connect();
  return c;
}
/** Adds a toxic, runs f on a connection opened before it, removes it. */
async function withToxic(proxy, body, f) {
  const toxic = await proxy.addToxic(body);
  try {
    return await f();
  } finally {
    await toxic.remove();
  }
}

await test("version and the proxies made", async () => {
  const v = JSON.parse(await toxiproxy.getVersion());
  assert(v.version.startsWith("2."), v.version);
  const all = await toxiproxy.getAll();
  assert(Object.keys(all).sort().join() === "node_pg,node_redis", Object.keys(all));
  const again = await rejects(() =>
    toxiproxy.createProxy({ name: "node_redis", listen: "127.0.0.1:0", upstream: process.env.REDIS_ADDR }),
  );
  assert(String(again.message).includes("409"), again.message);
});

await test("redis through the proxy, no toxic", async () => {
  const c = redis();
  await c.connect();
  await c.set("tp:node:k", "v".repeat(100));
  await c.set("tp:node:big", "b".repeat(3000));
  assert((await c.get("tp:node:k")) === "v".repeat(100), "value");
  c.disconnect();
});

await test("latency on an open redis connection", async () => {
  const c = redis();
  await c.connect();
  await c.ping();
  const [v, took] = await withToxic(redisProxy, { type: "latency", attributes: { latency: 200 } }, () =>
    timed(() => c.get("tp:node:k")),
  );
  c.disconnect();
  assert(v === "v".repeat(100), v);
  assert(took >= 0.2, took);
});

await test("bandwidth on redis", async () => {
  const c = redis();
  await c.connect();
  await c.ping();
  const [v, took] = await withToxic(redisProxy, { type: "bandwidth", attributes: { rate: 10 } }, () =>
    timed(() => c.get("tp:node:big")),
  );
  c.disconnect();
  assert(v.length === 3000, v.length);
  assert(took >= 0.25, took);
});

await test("slicer on redis", async () => {
  const c = redis();
  await c.connect();
  await c.ping();
  const [v, took] = await withToxic(
    redisProxy,
    { type: "slicer", attributes: { average_size: 1, size_variation: 0, delay: 2000 } },
    () => timed(() => c.get("tp:node:k")),
  );
  c.disconnect();
  assert(v === "v".repeat(100), v);
  assert(took >= 0.1, took);
});

await test("timeout on redis", async () => {
  const c = redis();
  await c.connect();
  await c.ping();
  const [, took] = await withToxic(redisProxy, { type: "timeout", attributes: { timeout: 300 } }, () =>
    timed(() => rejects(() => c.get("tp:node:k"))),
  );
  c.disconnect();
  assert(took >= 0.25, took);
});

await test("reset_peer on redis", async () => {
  const c = redis();
  await c.connect();
  await c.ping();
  const e = await withToxic(
    redisProxy,
    { type: "reset_peer", stream: "upstream", attributes: { timeout: 0 } },
    () => rejects(() => c.get("tp:node:k")),
  );
  c.disconnect();
  assert(e instanceof Error, e);
});

await test("limit_data on redis", async () => {
  const c = redis();
  await c.connect();
  await c.ping();
  await withToxic(redisProxy, { type: "limit_data", attributes: { bytes: 10 } }, () =>
    rejects(() => c.get("tp:node:k")),
  );
  c.disconnect();
});

await test("slow_close on redis", async () => {
  await withToxic(redisProxy, { type: "slow_close", attributes: { delay: 300 } }, async () => {
    const took = await new Promise((resolve, reject) => {
      const s = net.connect(rPort, rHost, () => s.write("QUIT\r\n"));
      let okAt = null;
      s.on("data", () => {
        okAt = okAt ?? performance.now();
      });
      s.on("end", () => resolve((performance.now() - okAt) / 1000));
      s.on("error", reject);
    });
    assert(took >= 0.25, took);
  });
});

await test("an unknown toxic type is refused", async () => {
  const e = await rejects(() => redisProxy.addToxic({ type: "latencyy" }));
  assert(String(e.message).includes("400"), e.message);
});

await test("a proxy down refuses redis, up again serves it", async () => {
  await redisProxy.update({ enabled: false });
  const c = redis();
  await rejects(() => c.connect());
  c.disconnect();
  await redisProxy.update({ enabled: true });
  const d = redis();
  await d.connect();
  assert((await d.ping()) === "PONG", "ping");
  d.disconnect();
});

await test("latency on a postgres query", async () => {
  const c = await pgClient();
  await c.query("SELECT 1");
  const [r, took] = await withToxic(pgProxy, { type: "latency", attributes: { latency: 200 } }, () =>
    timed(() => c.query("SELECT 1 AS one")),
  );
  await c.end();
  assert(r.rows[0].one === 1, r.rows);
  assert(took >= 0.2, took);
});

await test("reset_peer on a postgres query", async () => {
  const c = await pgClient();
  await c.query("SELECT 1");
  await withToxic(pgProxy, { type: "reset_peer", stream: "upstream", attributes: { timeout: 0 } }, () =>
    rejects(() => c.query("SELECT 1")),
  );
  await c.end().catch(() => {});
});

await test("timeout on a postgres query", async () => {
  const c = await pgClient();
  await c.query("SELECT 1");
  const [, took] = await withToxic(pgProxy, { type: "timeout", attributes: { timeout: 300 } }, () =>
    timed(() => rejects(() => c.query("SELECT 1"))),
  );
  await c.end().catch(() => {});
  assert(took >= 0.25, took);
});

await test("populate and reset", async () => {
  const made = await toxiproxy.populate([
    { name: "node_redis", listen: redisProxy.listen, upstream: process.env.REDIS_ADDR },
  ]);
  assert(made.node_redis.listen === redisProxy.listen, made.node_redis.listen);
  await redisProxy.addToxic({ type: "latency", attributes: { latency: 1000 } });
  await toxiproxy.reset();
  const toxics = await (await fetch(`${process.env.TOXIPROXY_URL}/proxies/node_redis/toxics`)).json();
  assert(toxics.length === 0, JSON.stringify(toxics));
});

if (failures.length) {
  console.log(`${failures.length} failed: ${failures.join(", ")}`);
  process.exit(1);
}
console.log("all passed");
