"""backoff 2.2.1: on_exception(expo, jitter=None): the same waits for every client.

Waits: exactly 0.5 s, 1 s, 2 s. Expected: jitter fail (no jitter).
"""
import backoff
import httpx

from fleet import fleet, is_4xx, new_key, post_raising


@backoff.on_exception(backoff.expo, (httpx.HTTPStatusError, httpx.TransportError),
                      factor=0.5, max_tries=4, jitter=None, giveup=is_4xx, logger=None)
async def attempt(client, i, key):
    return await post_raising(client, i, key)


async def operation(i, client):
    return await attempt(client, i, new_key())


fleet(operation)
