"""A plain retry loop with NO delay and a generous limit (300 attempts), 10 clients, through an
outage: every client keeps calling at full speed. Expected: circuit_breaker fail.
"""
import httpx

from fleet import fleet, new_key, post


async def operation(i, client):
    key = new_key()
    r = None
    for attempt in range(300):
        try:
            r = await post(client, i, key)
        except httpx.TransportError:
            continue
        if r.status_code < 500:
            break
    return r


fleet(operation, default_clients=10)
