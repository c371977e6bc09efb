"""A product service that reads through a Redis cache with redis-py, and either treats a failing
cache as a miss or fails its request.

    python cache.py [--redis URL] --on-error miss|fail [--via HOST:PORT] [--bind 127.0.0.1:0]
                    [--slow-ms 5]

`--redis` defaults to `$REDIS_URL`. `--via HOST:PORT` reaches that Redis through a proxy at
HOST:PORT (a fault server's `protocol: redis` proxy). Connections are opened when a request first
needs one, so the service may start before the proxy does.

It prints `listening on http://HOST:PORT` when ready and serves until it is stopped:

    GET /products/{n}   200 {"id": n, "name": "product-n", "source": "cache"|"store"},
                        404 for n < 1, 503 when the cache failed and `--on-error fail`
    GET /health         200

A product is looked up in Redis (`GET product:{n}`); on a miss it is read from the store (an
in-process table that answers after `--slow-ms`, the slow dependency the cache is there for) and
written back (`SET product:{n} … EX 60`). What the cache's failures do — an error reply such as
`-LOADING` (redis-py's BusyLoadingError), `-READONLY` (ReadOnlyError), `-BUSY`, `-OOM`, or a
connection that drops (ConnectionError):

- `miss`: the failure is a miss: the product comes from the store, the write-back is skipped
  when it fails too, and the client gets its 200.
- `fail`: the request fails with 503.
"""

import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


def handler(cache, args):
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
            if self.path == "/health":
                return self.answer(200, {"ok": True})
            parts = self.path.strip("/").split("/")
            if len(parts) != 2 or parts[0] != "products" or not parts[1].isdigit():
                return self.answer(404, {"error": "not found"})
            n = int(parts[1])
            if n < 1:
                return self.answer(404, {"error": "no such product"})
            key = f"product:{n}"
            try:
                cached = cache.get(key)
            except redis.RedisError as e:
                if args.on_error == "fail":
                    return self.answer(503, {"error": type(e).__name__, "detail": str(e)})
                cached = None
            if cached is not None:
                return self.answer(200, {**json.loads(cached), "source": "cache"})
            time.sleep(args.slow_ms / 1000.0)
            product = {"id": n, "name": f"product-{n}"}
            try:
                cache.set(key, json.dumps(product), ex=60)
            except redis.RedisError as e:
                if args.on_error == "fail":
                    return self.answer(503, {"error": type(e).__name__, "detail": str(e)})
            self.answer(200, {**product, "source": "store"})

        def log_message(self, *args):
            pass

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis", default=os.environ.get("REDIS_URL"))
    p.add_argument("--via", metavar="HOST:PORT")
    p.add_argument("--on-error", choices=["miss", "fail"], required=True)
    p.add_argument("--bind", default="127.0.0.1:0")
    p.add_argument("--slow-ms", type=float, default=5.0)
    args = p.parse_args()
    if not args.redis:
        p.error("give --redis URL or set REDIS_URL")
    url = args.redis
    if args.via:
        # The URL's address replaced, its user, password and database kept (redis-py lets a
        # URL's parts win over keyword arguments).
        parts = urlsplit(url)
        auth = parts.netloc.rpartition("@")[0]
        url = urlunsplit(parts._replace(netloc=f"{auth}@{args.via}" if auth else args.via))
    # No retries inside redis-py: what the service does with a failure is the point.
    cache = redis.Redis.from_url(
        url, socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0)
    )
    host, port = args.bind.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), handler(cache, args))
    print(f"listening on http://{host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
