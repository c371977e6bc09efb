"""An orders service on PostgreSQL, written with psycopg 3, that handles its database's failures
rightly or wrongly.

    python orders.py [--database URL] --schema NAME --retry whole|statement|none
                     --key unique|none [--via HOST:PORT] [--fresh]
                     [--bind 127.0.0.1:0] [--attempts 5] [--backoff-ms 20]

`--database` defaults to `$DATABASE_URL`. `--via HOST:PORT` reaches that database through a proxy
at HOST:PORT (a fault server's `protocol: postgres` proxy): the same user, password and database,
another address. The schema is made at start over a direct connection; the orders, and the
counts, go through the proxy, on connections opened when a request first needs one — so the
service may start before the proxy does. `--fresh` drops the schema first (an experiment that
replays the same Idempotency-Keys starts from no orders).

It prints `listening on http://HOST:PORT` when ready and serves until it is stopped:

    POST /orders              {"sku": "...", "qty": N} with an Idempotency-Key header:
                              201 {"id": N, "attempts": K} once the order is committed,
                              200 with the order a key already made, 503 when it gave up
    GET  /orders/count?key=K  {"key": K, "count": N}: the orders the key made
    GET  /health              200

An order is one SERIALIZABLE transaction: BEGIN; INSERT INTO orders (idempotency_key, sku, qty)
… RETURNING id; UPDATE stock SET qty = qty - N WHERE sku = …; COMMIT. Its tables live in the
schema `--schema` (made at start), reached with `options=-c search_path=SCHEMA`.

`--retry`, what it does when a statement fails with a transient error — 40001
serialization_failure, 40P01 deadlock_detected, or the connection lost (57P01 admin_shutdown, a
reset, a lost answer):

- `whole`: rolls back and runs the whole transaction again on a sound connection, after a backoff
  (exponential from `--backoff-ms`, halved at random), up to `--attempts` times; then 503.
- `statement`: rolls back and runs only the statement that failed again, in a transaction of its
  own, as a retry wrapper around each statement does: the statements before it are lost (an order
  whose stock UPDATE failed once is answered 201 and was never inserted).
- `none`: answers 503 at the first failure.

`--key`, what makes a second attempt of the same order safe:

- `unique`: `idempotency_key` is UNIQUE: an INSERT of a key already committed fails with 23505,
  which is never retried; the service answers with the order the key made. After an ambiguous
  commit (the COMMIT reached the database, its answer was lost) the retry finds the order.
- `none`: no constraint: after an ambiguous commit the retry inserts the order again — two orders
  for one key.
"""

import argparse
import json
import os
import queue
import random
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import psycopg
import psycopg.conninfo
from psycopg import errors

TRANSIENT = (errors.SerializationFailure, errors.DeadlockDetected)


class Service:
    def __init__(self, args):
        self.args = args
        self.url = args.database
        if args.via:
            host, port = args.via.rsplit(":", 1)
            self.url = psycopg.conninfo.make_conninfo(args.database, host=host, port=port)
        self.options = f"-c search_path={args.schema}"
        self.pool = queue.LifoQueue()
        with psycopg.connect(args.database, autocommit=True) as conn:
            if args.fresh:
                conn.execute(f'DROP SCHEMA IF EXISTS "{args.schema}" CASCADE')
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{args.schema}"')
            unique = "UNIQUE" if args.key == "unique" else ""
            conn.execute(
                f'CREATE TABLE IF NOT EXISTS "{args.schema}".orders ('
                f" id bigserial PRIMARY KEY, idempotency_key text NOT NULL {unique},"
                " sku text NOT NULL, qty integer NOT NULL)"
            )
            conn.execute(
                f'CREATE TABLE IF NOT EXISTS "{args.schema}".stock ('
                " sku text PRIMARY KEY, qty integer NOT NULL)"
            )

    def connection(self):
        try:
            return self.pool.get_nowait()
        except queue.Empty:
            conn = psycopg.connect(self.url, options=self.options)
            conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
            return conn

    def release(self, conn):
        if conn.closed or conn.broken:
            return
        self.pool.put(conn)

    def backoff(self, attempt):
        base = self.args.backoff_ms / 1000.0 * (2 ** (attempt - 1))
        time.sleep(min(base, 1.0) * random.uniform(0.5, 1.0))

    def existing(self, key):
        conn = self.connection()
        try:
            row = conn.execute(
                "SELECT id FROM orders WHERE idempotency_key = %s ORDER BY id LIMIT 1", (key,)
            ).fetchone()
            conn.rollback()
            return row[0] if row else None
        finally:
            self.release(conn)

    def transaction(self, conn, key, sku, qty):
        """The order's transaction; raises what the database raised."""
        with conn.transaction():
            order_id = conn.execute(
                "INSERT INTO orders (idempotency_key, sku, qty) VALUES (%s, %s, %s) RETURNING id",
                (key, sku, qty),
            ).fetchone()[0]
            conn.execute("UPDATE stock SET qty = qty - %s WHERE sku = %s", (qty, sku))
        return order_id

    def create(self, key, sku, qty):
        """(status, body) for one order."""
        mode = self.args.retry
        if mode == "statement":
            return self.create_statement_by_statement(key, sku, qty)
        failure = None
        for attempt in range(1, self.args.attempts + 1):
            conn = self.connection()
            try:
                order_id = self.transaction(conn, key, sku, qty)
                self.release(conn)
                return 201, {"id": order_id, "attempts": attempt}
            except errors.UniqueViolation:
                self.release(conn)
                return 200, {"id": self.existing(key), "attempts": attempt}
            except TRANSIENT as e:
                self.release(conn)
                failure = e
            except psycopg.OperationalError as e:
                # The connection is gone (57P01, a reset, a lost answer): never reused.
                conn.close()
                failure = e
            except psycopg.Error as e:
                self.release(conn)
                return 503, {"error": type(e).__name__, "sqlstate": e.sqlstate}
            if mode == "none":
                break
            self.backoff(attempt)
        return 503, {"error": type(failure).__name__, "sqlstate": getattr(failure, "sqlstate", None)}

    def create_statement_by_statement(self, key, sku, qty):
        """The wrong way: each statement retried on its own, as if it were the whole work."""
        conn = self.connection()
        attempts = 1

        def run(sql, params):
            nonlocal conn, attempts
            for attempt in range(1, self.args.attempts + 1):
                try:
                    return conn.execute(sql, params)
                except TRANSIENT:
                    conn.rollback()
                except psycopg.OperationalError:
                    conn.close()
                    conn = self.connection()
                attempts += 1
                self.backoff(attempt)
            raise RuntimeError("gave up")

        try:
            order_id = run(
                "INSERT INTO orders (idempotency_key, sku, qty) VALUES (%s, %s, %s) RETURNING id",
                (key, sku, qty),
            ).fetchone()[0]
            run("UPDATE stock SET qty = qty - %s WHERE sku = %s", (qty, sku))
            conn.commit()
            return 201, {"id": order_id, "attempts": attempts}
        except errors.UniqueViolation:
            conn.rollback()
            return 200, {"id": self.existing(key), "attempts": attempts}
        except (psycopg.Error, RuntimeError) as e:
            return 503, {"error": type(e).__name__}
        finally:
            if not conn.closed:
                if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.rollback()
                self.release(conn)

    def count(self, key):
        conn = self.connection()
        try:
            n = conn.execute(
                "SELECT count(*) FROM orders WHERE idempotency_key = %s", (key,)
            ).fetchone()[0]
            conn.rollback()
            return n
        finally:
            self.release(conn)


def handler(service):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            url = urlparse(self.path)
            if url.path == "/health":
                return self.answer(200, {"ok": True})
            if url.path == "/orders/count":
                key = parse_qs(url.query).get("key", [""])[0]
                return self.answer(200, {"key": key, "count": service.count(key)})
            self.answer(404, {"error": "not found"})

        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            if urlparse(self.path).path != "/orders":
                return self.answer(404, {"error": "not found"})
            key = self.headers.get("idempotency-key")
            try:
                order = json.loads(body)
                sku, qty = str(order["sku"]), int(order["qty"])
            except (ValueError, KeyError, TypeError):
                return self.answer(400, {"error": "expected {\"sku\": ..., \"qty\": N}"})
            if not key:
                return self.answer(400, {"error": "Idempotency-Key is required"})
            status, out = service.create(key, sku, qty)
            self.answer(status, out)

        def log_message(self, *args):
            pass

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--database", default=os.environ.get("DATABASE_URL"))
    p.add_argument("--via", metavar="HOST:PORT")
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--schema", required=True)
    p.add_argument("--retry", choices=["whole", "statement", "none"], required=True)
    p.add_argument("--key", choices=["unique", "none"], required=True)
    p.add_argument("--bind", default="127.0.0.1:0")
    p.add_argument("--attempts", type=int, default=5)
    p.add_argument("--backoff-ms", type=float, default=20.0)
    args = p.parse_args()
    if not args.database:
        p.error("give --database URL or set DATABASE_URL")
    host, port = args.bind.rsplit(":", 1)
    service = Service(args)
    server = ThreadingHTTPServer((host, int(port)), handler(service))
    print(f"listening on http://{host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
