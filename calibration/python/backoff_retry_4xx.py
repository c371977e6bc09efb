"""backoff 2.2.1: on_exception on every HTTPStatusError with NO giveup: a 400 is retried too.

backoff retries every exception of the listed types unless `giveup` says otherwise (its default
giveup is `lambda e: False`). Expected: retry_on_4xx fail.

Waits: full_jitter(factor * 2**n) = U(0, 0.5 s), U(0, 1 s): factor lowered from its default 1 to
0.5, as in backoff_expo_full.py, to keep the run short. At 0.05 (U(0, 50 ms), U(0, 100 ms)) the
waits were shorter than the pace at which thirty clients on one event loop handle their 503s
(retries 47-161 ms after their failures): the server saw the handling, not the backoff.
"""
import backoff
import httpx

from fleet import fleet, new_key, post_raising


@backoff.on_exception(backoff.expo, (httpx.HTTPStatusError, httpx.TransportError),
                      factor=0.5, max_tries=3, logger=None)
async def attempt(client, i, key):
    return await post_raising(client, i, key)


async def operation(i, client):
    return await attempt(client, i, new_key())


fleet(operation, default_clients=20)
