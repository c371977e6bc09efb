"""stamina 25.2.0: @stamina.retry with its defaults (wait_initial 0.1 s, wait_jitter 1.0 s, exp base 2),
retrying 5xx and connection errors only; ignores Retry-After (a bool hook).

Waits: min(5, 0.1 * 2**(n-1) + U(0, 1.0)). Expected: jitter pass; retry_after fail (ignores it).
"""
import httpx
import stamina

from fleet import fleet, new_key, post_raising


def transient(e: Exception) -> bool:
    if isinstance(e, httpx.HTTPStatusError):
        return e.response.status_code >= 500 or e.response.status_code == 429
    return isinstance(e, httpx.TransportError)


@stamina.retry(on=transient, attempts=4)
async def attempt(client, i, key):
    return await post_raising(client, i, key)


async def operation(i, client):
    return await attempt(client, i, new_key())


fleet(operation)
