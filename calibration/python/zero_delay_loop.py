"""The known problem: a plain retry loop with NO delay, 50 clients on one asyncio event loop.

Up to 4 attempts, retrying a 5xx or a connection error at once. Any gap between a failure and
the retry is the event loop's own scheduling (response handling of the other 49 clients).
Expected `jitter`: fail (immediate retries, no backoff).
"""
import httpx

from fleet import fleet, new_key, post


async def operation(i, client):
    key = new_key()
    for attempt in range(4):
        try:
            r = await post(client, i, key)
        except httpx.TransportError:
            continue
        if r.status_code < 500:
            return r
    return r


fleet(operation, default_clients=50)
