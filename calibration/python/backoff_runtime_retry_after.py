"""backoff 2.2.1: on_predicate(backoff.runtime, value=Retry-After) — backoff's documented way to
honour Retry-After ("Using a header or value from the response to determine wait time").

Expected: retry_after pass.
"""
import backoff

from fleet import fleet, new_key, post


def retry_after(r):
    return float(r.headers.get("Retry-After", "0.1"))


@backoff.on_predicate(backoff.runtime, predicate=lambda r: r.status_code in (429, 503),
                      value=retry_after, jitter=None, max_tries=3, logger=None)
async def attempt(client, i, key):
    return await post(client, i, key)


async def operation(i, client):
    return await attempt(client, i, new_key())


fleet(operation, default_clients=20)
