"""A plain retry loop with NO delay and ONE retry (2 attempts), 50 clients on one asyncio event loop.

The retry is sent as soon as the failure is handled: any gap between a failure and the retry is
the event loop's own scheduling (handling the other 49 clients' responses). With a single retry
there is no later attempt to compare with, so only the spread of this one retry wave can tell.
Expected `jitter`: fail (the retries come back at the pace of response handling).
"""
from fleet import fleet, immediate_retries

fleet(immediate_retries(2), default_clients=50)
