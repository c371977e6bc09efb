"""A small HTTP service with a Redis cache, for `harness exec`: GET /item asks the cache (PING,
over a connection of its own to HARNESS_PROXY_CACHE_ADDR, the fault server's TCP proxy) and
answers 200 when it answers within 300 ms, 503 when it does not. Standard library only.

Usage: python3 cache_service.py PORT
"""

import os
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CACHE = os.environ["HARNESS_PROXY_CACHE_ADDR"]
HOST, PORT = CACHE.rsplit(":", 1)


def cache_answers():
    try:
        with socket.create_connection((HOST, int(PORT)), timeout=0.3) as s:
            s.settimeout(0.3)
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        ok = cache_answers()
        body = b"cached\n" if ok else b"cache unavailable\n"
        self.send_response(200 if ok else 503)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
