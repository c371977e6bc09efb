"""backoff 2.2.1: on_exception(expo, factor=0.01) with default full jitter and max_time 12 s, 10
clients, through an outage: each client's attempt rate falls as the waits double.
Expected: circuit_breaker pass (the rate in the outage's second half is far below the first's).
"""
import backoff
import httpx

from fleet import fleet, is_4xx, new_key, post_raising


@backoff.on_exception(backoff.expo, (httpx.HTTPStatusError, httpx.TransportError),
                      factor=0.01, max_time=12, giveup=is_4xx, logger=None)
async def attempt(client, i, key):
    return await post_raising(client, i, key)


async def operation(i, client):
    return await attempt(client, i, new_key())


fleet(operation, default_clients=10)
