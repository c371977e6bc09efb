"""backoff 2.2.1 around a wrapper that makes a NEW Idempotency-Key inside the retried function.

The decorator re-runs the function, so the key is regenerated on every attempt: a lost response
(processed, answer dropped) is retried as a new order. Expected: key_stability fail, duplicates fail.
"""
import backoff
import httpx

from fleet import fleet, is_4xx, new_key, post_raising


@backoff.on_exception(backoff.expo, (httpx.HTTPStatusError, httpx.TransportError),
                      factor=0.05, max_tries=3, giveup=is_4xx, logger=None)
async def attempt(client, i):
    return await post_raising(client, i, new_key())  # the bug: a key per attempt


async def operation(i, client):
    return await attempt(client, i)


fleet(operation, default_clients=20)
