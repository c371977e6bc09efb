"""A `harness conform` adapter with a hand-rolled retry loop whose every part can be broken on
purpose, so that each rule of the HTTP suite is shown failing on the defect it exists for.

Makes HARNESS_CALLS calls of POST $HARNESS_FAULT_URL/orders, HARNESS_CONCURRENCY at once (one
thread each, released together by a barrier), each with its own Idempotency-Key and the same body
on every attempt; all of them are one client (`x-client-id: adapter`), as calls through one client
object of a service are. Python's standard library only.

Defaults: up to 5 attempts, exponential backoff from 0.2 s (×2, cap 2 s), each wait drawn from its upper three quarters,
Retry-After honoured, retries on no answer, 5xx, 408 and 429 only, the key kept, and when
HARNESS_DEADLINE_MS is set, no attempt or wait past that deadline from the call's start.
--jitter FAMILY draws the wait in another family: full (U(0, backoff)), equal (U(backoff / 2,
backoff)) or decorrelated (U(0.2 s, 3 × the previous wait), capped at 5 s); --calls N makes N calls
whatever HARNESS_CALLS says (a fleet larger than the case's, to read the family from more retries);
--base S starts the backoff at S seconds instead of 0.2.
Defects (flags): --no-retry, --no-jitter, --no-backoff, --constant-backoff (0.3 s, ±33 %),
--retry-4xx, --new-key-per-attempt,
--ignore-retry-after, --ignore-deadline, --retry-forever (attempts unbounded and the backoff capped at 0.5 s: a
client that keeps calling through an outage),
--breaker (one breaker for the client: open after 5 consecutive failures, then one probe a
second until one succeeds).
"""
import argparse
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

p = argparse.ArgumentParser()
for flag in ["no-retry", "no-jitter", "no-backoff", "constant-backoff", "retry-4xx", "new-key-per-attempt",
             "ignore-retry-after", "ignore-deadline", "retry-forever", "breaker"]:
    p.add_argument("--" + flag, action="store_true")
p.add_argument("--jitter", choices=["quarters", "full", "equal", "decorrelated"], default="quarters")
p.add_argument("--calls", type=int)
p.add_argument("--base", type=float, default=0.2)
args = p.parse_args()

URL = os.environ["HARNESS_FAULT_URL"].rstrip("/") + "/orders"
CALLS = args.calls or int(os.environ.get("HARNESS_CALLS", "10"))
CONCURRENCY = args.calls or int(os.environ.get("HARNESS_CONCURRENCY", str(CALLS)))
DEADLINE = time.monotonic() + 50
CALL_DEADLINE = None if args.ignore_deadline or not os.environ.get("HARNESS_DEADLINE_MS") \
    else float(os.environ["HARNESS_DEADLINE_MS"]) / 1000


def attempt(i, key, timeout=5.0):
    """One POST: (status or None for no answer, Retry-After seconds or None)."""
    body = json.dumps({"sku": f"sku-{i}", "qty": 1}).encode()
    req = urllib.request.Request(URL, data=body, method="POST", headers={
        "content-type": "application/json", "idempotency-key": key, "x-client-id": "adapter"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status, None
    except urllib.error.HTTPError as e:
        e.read()
        ra = e.headers.get("retry-after")
        return e.code, (float(ra) if ra and ra.strip().isdigit() else None)
    except OSError:
        return None, None


def retryable(status):
    if status is None or status >= 500 or status in (408, 429):
        return True
    return args.retry_4xx and 400 <= status < 500


class Breaker:
    """Closed until 5 consecutive failures; then open for a second, then half-open: one call
    probes while the others wait; a failed probe opens it again, a success closes it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.failures = 0
        self.open_until = 0.0
        self.probing = False

    def enter(self):
        while True:
            with self.lock:
                if time.monotonic() >= self.open_until and not self.probing:
                    self.probing = self.failures >= 5
                    return
            time.sleep(0.02)

    def leave(self, ok):
        with self.lock:
            self.probing = False
            self.failures = 0 if ok else self.failures + 1
            if self.failures >= 5:
                self.open_until = time.monotonic() + 1.0


BREAKER = Breaker()


def call(i, start):
    start.wait()
    key = str(uuid.uuid4())
    ends = None if CALL_DEADLINE is None else time.monotonic() + CALL_DEADLINE
    max_attempts = 1 if args.no_retry else 10_000 if args.retry_forever else 5
    n = 0
    previous = args.base
    while True:
        n += 1
        if args.breaker:
            BREAKER.enter()
        status, retry_after = attempt(i, key, 5.0 if ends is None else max(0.01, min(5.0, ends - time.monotonic())))
        ok = status is not None and status < 400
        if args.breaker:
            BREAKER.leave(ok)
        if ok:
            return "ok"
        if n >= max_attempts or not retryable(status) or time.monotonic() > DEADLINE:
            return f"gave up: {status}"
        if args.no_backoff:
            delay = 0.0
        elif args.constant_backoff:
            delay = random.uniform(0.2, 0.4)
        elif args.jitter == "decorrelated" and not args.no_jitter:
            delay = previous = min(5.0, random.uniform(args.base, 3 * previous))
        else:
            delay = min(0.5 if args.retry_forever else 2.0, args.base * 2 ** (n - 1))
            if args.no_jitter:
                pass
            elif args.jitter == "full":
                delay = random.uniform(0, delay)
            elif args.jitter == "equal":
                delay = random.uniform(delay / 2, delay)
            else:
                delay = random.uniform(delay / 4, delay)
        if retry_after is not None and not args.ignore_retry_after:
            delay = max(delay, retry_after)
        if ends is not None and time.monotonic() + delay >= ends:
            return f"deadline: {status}"
        time.sleep(delay)
        if args.new_key_per_attempt:
            key = str(uuid.uuid4())


results = []
lock = threading.Lock()
start = threading.Barrier(min(CALLS, CONCURRENCY))


def worker(indices):
    for i in indices:
        r = call(i, start if i < CONCURRENCY else threading.Barrier(1))
        with lock:
            results.append(r)


threads = [threading.Thread(target=worker, args=(range(t, CALLS, CONCURRENCY),))
           for t in range(min(CALLS, CONCURRENCY))]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"{sum(r == 'ok' for r in results)} of {CALLS} calls succeeded", file=sys.stderr)
