"""stamina 25.2.0: a backoff hook that returns the Retry-After seconds (stamina >= 25.1: "the hook may
return a float ... useful when the error carries ... a Retry-After header").

Expected: retry_after pass.
"""
import httpx
import stamina

from fleet import fleet, new_key, post_raising


def hook(e: Exception):
    if isinstance(e, httpx.HTTPStatusError):
        if e.response.status_code in (429, 503) and "Retry-After" in e.response.headers:
            return float(e.response.headers["Retry-After"])
        return e.response.status_code >= 500
    return isinstance(e, httpx.TransportError)


@stamina.retry(on=hook, attempts=3)
async def attempt(client, i, key):
    return await post_raising(client, i, key)


async def operation(i, client):
    return await attempt(client, i, new_key())


fleet(operation, default_clients=20)
