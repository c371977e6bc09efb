"""stamina 25.2.0: @stamina.retry with no bound on attempts and a timeout, the call's deadline
(HARNESS_DEADLINE_MS, else stamina's default 45 s), retrying 5xx and connection errors only.

stamina's timeout is tenacity's stop_after_delay (stamina/_core.py:712-713), which stops once the
time since the first attempt has reached it, checked after each failed attempt (tenacity 9.2.1,
tenacity/stop.py:117). The wait before the next attempt, 0.1 s × 2^(n-1) + U(0, 1 s)
(stamina/_core.py:653-655), is not cut to the time left: the attempt after a failure just before
the deadline starts up to that wait past it. Expected: deadline fail.
"""
import httpx
import stamina
from fleet import deadline, fleet, new_key, post_raising


def transient(e: Exception) -> bool:
    if isinstance(e, httpx.HTTPStatusError):
        return e.response.status_code >= 500 or e.response.status_code == 429
    return isinstance(e, httpx.TransportError)


@stamina.retry(on=transient, attempts=None, timeout=deadline() or 45.0)
async def attempt(client, i, key):
    return await post_raising(client, i, key)


async def operation(i, client):
    return await attempt(client, i, new_key())


fleet(operation)
