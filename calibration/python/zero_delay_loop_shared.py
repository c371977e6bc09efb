"""The known problem: a plain retry loop with NO delay, 50 tasks on one asyncio event loop sharing
one httpx.AsyncClient (one connection pool), as in a single service process.

Up to 4 attempts, retrying a 5xx or a connection error at once. Any gap between a failure and
the retry is the event loop's own scheduling (response handling of the other 49 clients).
Expected `jitter`: fail (immediate retries, no backoff).
"""
from fleet import fleet, immediate_retries

fleet(immediate_retries(4), default_clients=50, shared=True)
