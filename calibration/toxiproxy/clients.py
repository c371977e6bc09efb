"""Toxiproxy's Python client (toxiproxy-python) against the fault server's Toxiproxy API, each
toxic shown on a real Redis client's (redis-py) and a real PostgreSQL client's (psycopg)
connection through the proxies it makes.

Environment: TOXIPROXY_HOST, TOXIPROXY_PORT (the API), REDIS_ADDR (host:port of a real Redis),
PG_URL (postgres://user:password@host:port/db of a real PostgreSQL). Prints `ok NAME` or
`FAIL NAME: why` per case; exits 1 when any failed. Every bound on time is a lower bound: what a
toxic adds, never a speed.
"""

import os
import socket
import sys
import time
import traceback
from urllib.parse import urlparse

import psycopg
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

failures = []


def case(name):
    def run(f):
        try:
            f()
            print(f"ok {name}", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, then the next case runs
            failures.append(name)
            print(f"FAIL {name}: {e!r}", flush=True)
            traceback.print_exc(file=sys.stdout)
        return f

    return run


def host_port(addr):
    host, port = addr.rsplit(":", 1)
    return host.strip("[]"), int(port)


def timed(f):
    t = time.monotonic()
    out = f()
    return out, time.monotonic() - t


def expect_error(f, kinds):
    try:
        f()
    except kinds as e:
        return e
    raise AssertionError(f"expected one of {kinds}, got an answer")


APIConsumer.host = os.environ["TOXIPROXY_HOST"]
APIConsumer.port = int(os.environ["TOXIPROXY_PORT"])
server = Toxiproxy()
assert server.running(), "the API does not answer"
server.destroy_all()

redis_proxy = server.create(upstream=os.environ["REDIS_ADDR"], name="py_redis", listen="127.0.0.1:0")
r_host, r_port = host_port(redis_proxy.listen)
pg = urlparse(os.environ["PG_URL"])
pg_proxy = server.create(upstream=f"{pg.hostname}:{pg.port}", name="py_pg", listen="127.0.0.1:0")
p_host, p_port = host_port(pg_proxy.listen)


def rconn():
    # No retries: a toxic's error must reach the test, not be retried away.
    return redis.Redis(host=r_host, port=r_port, socket_timeout=10, retry=Retry(NoBackoff(), 0))


def pconn():
    return psycopg.connect(
        host=p_host, port=p_port, user=pg.username, password=pg.password,
        dbname=pg.path.lstrip("/"), connect_timeout=10, autocommit=True,
    )


@case("version and the proxies made")
def _():
    assert b'"version"' in server.version()
    assert set(server.proxies()) == {"py_redis", "py_pg"}
    try:
        server.create(upstream=os.environ["REDIS_ADDR"], name="py_redis")
        raise AssertionError("a second py_redis was made")
    except ProxyExists:
        pass


@case("redis through the proxy, no toxic")
def _():
    c = rconn()
    c.set("tp:py:k", "v" * 100)
    assert c.get("tp:py:k") == b"v" * 100
    c.set("tp:py:big", "b" * 3000)


@case("latency on an open redis connection")
def _():
    c = rconn()
    c.ping()
    redis_proxy.add_toxic(type="latency", attributes={"latency": 200})
    value, took = timed(lambda: c.get("tp:py:k"))
    redis_proxy.destroy_toxic("latency_downstream")
    assert value == b"v" * 100
    assert took >= 0.2, took


@case("bandwidth on redis")
def _():
    c = rconn()
    c.ping()
    redis_proxy.add_toxic(type="bandwidth", attributes={"rate": 10})
    value, took = timed(lambda: c.get("tp:py:big"))
    redis_proxy.destroy_toxic("bandwidth_downstream")
    assert len(value) == 3000
    assert took >= 0.25, took


@case("slicer on redis")
def _():
    c = rconn()
    c.ping()
    redis_proxy.add_toxic(type="slicer", attributes={"average_size": 1, "size_variation": 0, "delay": 2000})
    value, took = timed(lambda: c.get("tp:py:k"))
    redis_proxy.destroy_toxic("slicer_downstream")
    assert value == b"v" * 100
    assert took >= 0.1, took


@case("timeout on redis")
def _():
    c = rconn()
    c.ping()
    redis_proxy.add_toxic(type="timeout", attributes={"timeout": 300})
    _, took = timed(lambda: expect_error(lambda: c.get("tp:py:k"), (redis.exceptions.ConnectionError,)))
    redis_proxy.destroy_toxic("timeout_downstream")
    assert took >= 0.25, took


@case("reset_peer on redis")
def _():
    c = rconn()
    c.ping()
    redis_proxy.add_toxic(type="reset_peer", stream="upstream", attributes={"timeout": 0})
    e = expect_error(lambda: c.get("tp:py:k"), (redis.exceptions.ConnectionError,))
    redis_proxy.destroy_toxic("reset_peer_upstream")
    assert "reset" in str(e).lower() or "closed" in str(e).lower(), e


@case("limit_data on redis")
def _():
    c = rconn()
    c.ping()
    redis_proxy.add_toxic(type="limit_data", attributes={"bytes": 10})
    expect_error(lambda: c.get("tp:py:k"), (redis.exceptions.ConnectionError,))
    redis_proxy.destroy_toxic("limit_data_downstream")


@case("slow_close on redis")
def _():
    redis_proxy.add_toxic(type="slow_close", attributes={"delay": 300})
    s = socket.create_connection((r_host, r_port), timeout=10)
    s.sendall(b"QUIT\r\n")
    assert s.recv(16).startswith(b"+OK")
    _, took = timed(lambda: s.recv(16))
    s.close()
    redis_proxy.destroy_toxic("slow_close_downstream")
    assert took >= 0.25, took


@case("an unknown toxic, an unknown proxy")
def _():
    for bad in [lambda: redis_proxy.add_toxic(type="latencyy"),
                lambda: redis_proxy.add_toxic(type="latency", attributes={"latency": -1})]:
        try:
            bad()
            raise AssertionError("accepted")
        except InvalidToxic:
            pass
    try:
        APIConsumer.get("/proxies/nope")
        raise AssertionError("found")
    except NotFound:
        pass


@case("a proxy down refuses redis, up again serves it")
def _():
    with redis_proxy.down():
        expect_error(lambda: rconn().ping(), (redis.exceptions.ConnectionError,))
    assert rconn().ping()


@case("latency on a postgres query")
def _():
    with pconn() as c:
        c.execute("SELECT 1")
        pg_proxy.add_toxic(type="latency", attributes={"latency": 200})
        row, took = timed(lambda: c.execute("SELECT 1").fetchone())
        pg_proxy.destroy_toxic("latency_downstream")
        assert row == (1,)
        assert took >= 0.2, took


@case("reset_peer on a postgres query")
def _():
    c = pconn()
    c.execute("SELECT 1")
    pg_proxy.add_toxic(type="reset_peer", stream="upstream", attributes={"timeout": 0})
    expect_error(lambda: c.execute("SELECT 1"), (psycopg.OperationalError,))
    pg_proxy.destroy_toxic("reset_peer_upstream")
    c.close()


@case("timeout on a postgres query")
def _():
    c = pconn()
    c.execute("SELECT 1")
    pg_proxy.add_toxic(type="timeout", attributes={"timeout": 300})
    _, took = timed(lambda: expect_error(lambda: c.execute("SELECT 1"), (psycopg.OperationalError,)))
    pg_proxy.destroy_toxic("timeout_downstream")
    c.close()
    assert took >= 0.25, took


@case("reset enables every proxy and removes every toxic")
def _():
    redis_proxy.add_toxic(type="latency", attributes={"latency": 1000})
    redis_proxy.disable()
    assert server.reset()
    assert server.get_proxy("py_redis").enabled
    assert redis_proxy.toxics() == {}
    assert rconn().ping()


if failures:
    print(f"{len(failures)} failed: {', '.join(failures)}")
    sys.exit(1)
print("all passed")
