"""backoff 2.2.1: on_exception(expo) with its default jitter (full_jitter), giving up on 4xx.

Waits: full_jitter(factor * 2**n) = U(0, 0.5 s), U(0, 1 s), U(0, 2 s).
Expected: jitter pass; key_stability pass; duplicates pass. Given a deadline (HARNESS_DEADLINE_MS,
`harness conform`'s deadline case), it is backoff's max_time: no retry once the time is up, and no
wait longer than the time left (backoff/_async.py:153-158, backoff/_common.py:52-54): deadline pass.
"""
import backoff
import httpx

from fleet import deadline, fleet, is_4xx, new_key, post_raising


@backoff.on_exception(backoff.expo, (httpx.HTTPStatusError, httpx.TransportError),
                      factor=0.5, max_tries=4, max_time=deadline(), giveup=is_4xx, logger=None)
async def attempt(client, i, key):
    return await post_raising(client, i, key)


async def operation(i, client):
    return await attempt(client, i, new_key())  # one key per operation, reused on every attempt


fleet(operation)
