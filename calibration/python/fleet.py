"""Shared by the calibration fleet scripts: N clients on one asyncio event loop, released together.

Each client does one logical operation — POST $HARNESS_FAULT_URL/orders with a JSON body, an
Idempotency-Key and `x-client-id: c<i>` — under the retry of the library its script configures.
The script exits 0 whatever the operations' outcome (the harness judges the journal, not the
client); a one-line summary goes to stderr.

Env: HARNESS_FAULT_URL (set by `harness exec` and `harness conform`); the fleet size is
HARNESS_CALLS (set by `harness conform`), else CALIB_CLIENTS, else the script's default; at most
HARNESS_CONCURRENCY operations run at once when it is set (else all of them).
"""
import asyncio
import collections
import os
import ssl
import sys
import uuid

import httpx

URL = os.environ["HARNESS_FAULT_URL"].rstrip("/") + "/orders"


class Retryable(Exception):
    """A 5xx or 429 answer, carrying the response (for Retry-After)."""

    def __init__(self, response: httpx.Response):
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def new_key() -> str:
    return str(uuid.uuid4())


def body(i: int) -> dict:
    # The same body on every attempt of client i: key_stability fingerprints it.
    return {"sku": f"sku-{i}", "qty": 1}


async def post(client: httpx.AsyncClient, i: int, key: str) -> httpx.Response:
    """One attempt. Returns the response; raises nothing on an HTTP status."""
    r = await client.post(URL, json=body(i), headers={"Idempotency-Key": key, "x-client-id": f"c{i}"})
    await r.aread()
    return r


async def post_raising(client: httpx.AsyncClient, i: int, key: str) -> httpx.Response:
    """One attempt that raises httpx.HTTPStatusError on 4xx/5xx (what `raise_for_status` users do)."""
    r = await post(client, i, key)
    r.raise_for_status()
    return r


def is_4xx(e: Exception) -> bool:
    """backoff's `giveup` predicate: a 4xx other than 408/429 will not go away."""
    return (
        isinstance(e, httpx.HTTPStatusError)
        and 400 <= e.response.status_code < 500
        and e.response.status_code not in (408, 429)
    )


def immediate_retries(attempts: int):
    """The operation of a plain retry loop with no delay: up to `attempts` attempts under one key,
    retrying a 5xx or a connection error as soon as the failure is handled."""

    async def operation(i, client):
        key = new_key()
        r = None
        for _ in range(attempts):
            try:
                r = await post(client, i, key)
            except httpx.TransportError:
                continue
            if r.status_code < 500:
                return r
        return r

    return operation


def deadline() -> float | None:
    """The deadline a call is given, in seconds: HARNESS_DEADLINE_MS (set by `harness conform` in
    its deadline case), else none."""
    ms = os.environ.get("HARNESS_DEADLINE_MS")
    return float(ms) / 1000 if ms else None


def calls(default: int) -> int:
    """How many operations to make: HARNESS_CALLS, else CALIB_CLIENTS, else `default`."""
    return int(os.environ.get("HARNESS_CALLS") or os.environ.get("CALIB_CLIENTS") or default)


def concurrency(n: int) -> int:
    """How many at once: HARNESS_CONCURRENCY when set (at least 1), else all `n`."""
    return max(1, int(os.environ.get("HARNESS_CONCURRENCY") or n))


def fleet(operation, default_clients: int = 40, shared: bool = False) -> None:
    """Runs `operation(i, client)` for N clients released together, prints a summary, exits 0.

    shared=False: each client has its own httpx.AsyncClient (connection pool), as separate
    service instances would; shared=True: one AsyncClient for all, as N tasks of one service.
    """
    n = calls(default_clients)
    tls = ssl.create_default_context()  # made once: loading the CA bundle 50 times costs seconds

    async def main():
        start = asyncio.Event()
        slots = asyncio.Semaphore(concurrency(n))
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        common = httpx.AsyncClient(timeout=10.0, verify=tls, limits=limits) if shared else None

        async def one(i):
            async with httpx.AsyncClient(timeout=10.0, verify=tls) as own:
                client = common or own
                await start.wait()
                try:
                    async with slots:
                        r = await operation(i, client)
                    return f"{getattr(r, 'status_code', 'ok')}"
                except Exception as e:  # noqa: BLE001 — the outcome is only reported
                    return type(e).__name__

        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        await asyncio.sleep(0.1)  # every client is waiting on the barrier
        start.set()
        try:
            return await asyncio.gather(*tasks)
        finally:
            if common:
                await common.aclose()

    outcomes = asyncio.run(main())
    print(f"{os.path.basename(sys.argv[0])}: {n} clients: {dict(collections.Counter(outcomes))}", file=sys.stderr)
    sys.exit(0)
