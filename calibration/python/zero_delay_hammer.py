"""A plain retry loop with NO delay and no attempt limit (it gives up after 20 s), 10 clients,
through an outage: every client keeps calling at the pace of handling its responses.
Expected: circuit_breaker fail (the same pace in the outage's second half as in its first).
"""
import time

import httpx

from fleet import fleet, new_key, post


async def operation(i, client):
    key = new_key()
    r = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            r = await post(client, i, key)
        except httpx.TransportError:
            continue
        if r.status_code < 500:
            break
    return r


fleet(operation, default_clients=10)
