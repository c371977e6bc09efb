"""stamina 25.2.0: @stamina.retry with wait_jitter=0: the same waits for every client.

Waits: min(5, 0.1 * 2**(n-1) + 0) = 0.1 s, 0.2 s, 0.4 s — `_compute_backoff` draws no jitter when
max_jitter is 0 (stamina/_core.py:653-655). Expected: jitter fail (no jitter); key_stability pass;
duplicates pass.
"""
import httpx
import stamina

from fleet import fleet, new_key, post_raising


def transient(e: Exception) -> bool:
    if isinstance(e, httpx.HTTPStatusError):
        return e.response.status_code >= 500 or e.response.status_code == 429
    return isinstance(e, httpx.TransportError)


@stamina.retry(on=transient, attempts=4, wait_jitter=0)
async def attempt(client, i, key):
    return await post_raising(client, i, key)


async def operation(i, client):
    return await attempt(client, i, new_key())


fleet(operation)
