"""A webhook consumer written with a provider's own verification library, correctly or not.

    python consumer.py --library standardwebhooks|svix|stripe --mode MODE --secret SECRET
                       --db FILE [--bind 127.0.0.1:0]

It prints `listening on http://HOST:PORT` when ready and serves until it is stopped:

    POST /webhook            a delivery
    GET  /effects/{event_id} {"event_id": ..., "count": N}: the effects the event took
    GET  /state/{subject}    {"subject": ..., "type": ..., "seq": N} (404 if never seen)

Its system of record is SQLite: an effect row per processed event, the processed event ids under a
UNIQUE constraint (a duplicate is answered 200 and takes no effect, but in the `naive` and
`dup-409` modes below), and each subject's state,
moved forward only by `seq`. The body is an event as the harness's default payload writes it
(`id`, `type`, `data.object.id`, `data.object.seq`).

The modes, each judged as its code implies:

- `correct`: the library's verification first (`Webhook(secret).verify(body, headers)`, or
  `stripe.Webhook.construct_event(body, header, secret)` with its default tolerance), 400 on
  failure, then the effect. Every forgery is refused and takes no effect.
- `parse-first`: parses the body and takes the effect, then verifies: every forgery is answered
  400, and every forgery has already taken its effect.
- `no-tolerance`: checks the signature but not the time. With stripe, `construct_event(...,
  tolerance=None)`; with standardwebhooks or svix, whose `verify` always checks the time, the
  library's own `sign(id, timestamp, body)` compared with the signatures received. A stale
  delivery replayed as it was is accepted and takes its effect; every other forgery is refused.
- `naive`: verifies as `correct`, then takes the effect of every delivery it accepts, whether its
  id was processed before or not: a duplicate is answered 200 and takes its effect again.
- `dup-409`: `correct`, but a duplicate is answered 409 ("already processed"): no second effect,
  yet to the provider a failed delivery, redelivered on its schedule.
"""

import argparse
import hmac
import json
import sqlite3
import sys
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Refused(Exception):
    pass


def verifier(library, mode, secret):
    """A function (body, headers) -> None that raises Refused, as the mode's code does."""
    if library in ("standardwebhooks", "svix"):
        if library == "standardwebhooks":
            from standardwebhooks import Webhook
        else:
            from svix.webhooks import Webhook
        wh = Webhook(secret)
        if mode == "no-tolerance":
            def check(body, headers):
                try:
                    msg_id = headers["webhook-id"]
                    stamp = int(headers["webhook-timestamp"])
                    received = headers["webhook-signature"].split(" ")
                except (KeyError, ValueError) as e:
                    raise Refused(f"missing or malformed header: {e}")
                own = wh.sign(msg_id, datetime.fromtimestamp(stamp, tz=timezone.utc), body)
                if not any(hmac.compare_digest(own, r) for r in received):
                    raise Refused("no matching signature")
            return check

        def check(body, headers):
            try:
                wh.verify(body, headers)
            except Exception as e:  # WebhookVerificationError, or a malformed signature
                raise Refused(f"{type(e).__name__}: {e}")
        return check

    import stripe

    tolerance = None if mode == "no-tolerance" else stripe.Webhook.DEFAULT_TOLERANCE

    def check(body, headers):
        try:
            stripe.Webhook.construct_event(body, headers.get("stripe-signature", ""), secret, tolerance=tolerance)
        except Exception as e:  # SignatureVerificationError, or ValueError on a bad payload
            raise Refused(f"{type(e).__name__}: {e}")
    return check


class Store:
    def __init__(self, path):
        self.path = path
        with self.connect() as c:
            c.execute("PRAGMA journal_mode=WAL")
            c.executescript(
                """
                CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS processed (event_id TEXT NOT NULL UNIQUE);
                CREATE TABLE IF NOT EXISTS state (subject TEXT PRIMARY KEY, type TEXT NOT NULL, seq INTEGER NOT NULL);
                """
            )

    def connect(self):
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def record(self, event, once=True):
        """Takes the event's effect, once unless `once` is False; False when it was already
        processed."""
        subject = event["data"]["object"]
        with self.connect() as c:
            c.execute("BEGIN IMMEDIATE")
            try:
                c.execute("INSERT INTO processed (event_id) VALUES (?)", (event["id"],))
            except sqlite3.IntegrityError:
                if once:
                    c.execute("ROLLBACK")
                    return False
            c.execute("INSERT INTO effects (event_id) VALUES (?)", (event["id"],))
            c.execute(
                "INSERT INTO state (subject, type, seq) VALUES (?, ?, ?) "
                "ON CONFLICT (subject) DO UPDATE SET type = excluded.type, seq = excluded.seq "
                "WHERE excluded.seq > state.seq",
                (subject["id"], event["type"], subject["seq"]),
            )
            c.execute("COMMIT")
            return True

    def effects(self, event_id):
        with self.connect() as c:
            return c.execute("SELECT COUNT(*) FROM effects WHERE event_id = ?", (event_id,)).fetchone()[0]

    def state(self, subject):
        with self.connect() as c:
            return c.execute("SELECT type, seq FROM state WHERE subject = ?", (subject,)).fetchone()


def handler(mode, check, store):
    class Handler(BaseHTTPRequestHandler):
        def answer(self, status, value):
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            if self.path != "/webhook":
                return self.answer(404, {"error": "not found"})
            body = self.rfile.read(int(self.headers.get("content-length", "0"))).decode("utf-8")
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                if mode == "parse-first":
                    # The bug: the event is acted on before anyone checked who sent it.
                    store.record(json.loads(body))
                    check(body, headers)
                    return self.answer(200, {"status": "processed"})
                check(body, headers)
                fresh = store.record(json.loads(body), once=mode != "naive")
                if not fresh and mode == "dup-409":
                    # The bug: "already processed" is true, and to the provider a failure.
                    return self.answer(409, {"error": "already processed"})
                return self.answer(200, {"status": "processed" if fresh else "duplicate"})
            except Refused as e:
                return self.answer(400, {"error": str(e)})
            except (ValueError, KeyError, TypeError) as e:
                return self.answer(400, {"error": f"not an event: {e}"})

        def do_GET(self):
            parts = self.path.split("/")
            if len(parts) == 3 and parts[1] == "effects":
                return self.answer(200, {"event_id": parts[2], "count": store.effects(parts[2])})
            if len(parts) == 3 and parts[1] == "state":
                row = store.state(parts[2])
                if row is None:
                    return self.answer(404, {"error": "no such subject"})
                return self.answer(200, {"subject": parts[2], "type": row[0], "seq": row[1]})
            return self.answer(404, {"error": "not found"})

        def log_message(self, format, *args):
            print(f"{self.address_string()} {format % args}", file=sys.stderr, flush=True)

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--library", required=True, choices=["standardwebhooks", "svix", "stripe"])
    p.add_argument(
        "--mode", required=True, choices=["correct", "parse-first", "no-tolerance", "naive", "dup-409"]
    )
    p.add_argument("--secret", required=True)
    p.add_argument("--db", required=True, help="the SQLite database file")
    p.add_argument("--bind", default="127.0.0.1:0")
    a = p.parse_args()
    store = Store(a.db)
    host, _, port = a.bind.rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), handler(a.mode, verifier(a.library, a.mode, a.secret), store))
    print(f"listening on http://{host}:{server.server_address[1]}", flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
