"""backoff 2.2.1: on_exception on every HTTPStatusError with NO giveup: a 400 is retried too.

backoff retries every exception of the listed types unless `giveup` says otherwise (its default
giveup is `lambda e: False`). Expected: retry_on_4xx fail.
"""
import backoff
import httpx

from fleet import fleet, new_key, post_raising


@backoff.on_exception(backoff.expo, (httpx.HTTPStatusError, httpx.TransportError),
                      factor=0.05, max_tries=3, logger=None)
async def attempt(client, i, key):
    return await post_raising(client, i, key)


async def operation(i, client):
    return await attempt(client, i, new_key())


fleet(operation, default_clients=20)
