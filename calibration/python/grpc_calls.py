"""Shared by the gRPC calibration scripts: N calls of orders.v1.Orders/CreateOrder made with grpcio
(the real C-core client), under the service config the script gives, released together on one
channel.

Each call carries metadata `idempotency-key: <uuid>` (its `request_id` too) and `x-client-id: c<i>`,
and a deadline of 10 s; the service config's retry or hedging policy is grpcio's own (the channel
option `grpc.service_config`, retries enabled). The script exits 0 whatever the calls' outcome
(the harness judges the journal); a one-line summary goes to stderr.

Env: HARNESS_FAULT_URL (set by `harness exec` and `harness conform`); the number of calls is
HARNESS_CALLS (set by `harness conform`), else CALIB_CLIENTS, else the script's default; at most
HARNESS_CONCURRENCY are in flight at once when it is set (else all of them).
"""
import collections
import json
import os
import sys
import uuid
from urllib.parse import urlparse

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "proto"))

import grpc  # noqa: E402

protos, services = grpc.protos_and_services("orders/v1/orders.proto")


def target() -> str:
    u = urlparse(os.environ["HARNESS_FAULT_URL"])
    return f"{u.hostname}:{u.port}"


def method_config(**policy) -> str:
    """A service config naming orders.v1.Orders with one policy (retryPolicy or hedgingPolicy)."""
    config = {"name": [{"service": "orders.v1.Orders"}]}
    config.update(policy)
    return json.dumps({"methodConfig": [config]})


def run(service_config: str | None, default_calls: int = 8) -> None:
    n = int(os.environ.get("HARNESS_CALLS") or os.environ.get("CALIB_CLIENTS") or default_calls)
    at_once = max(1, int(os.environ.get("HARNESS_CONCURRENCY") or n))
    options = [("grpc.enable_retries", 1)]
    if service_config is not None:
        options.append(("grpc.service_config", service_config))
    outcomes = []
    with grpc.insecure_channel(target(), options=options) as channel:
        stub = services.OrdersStub(channel)
        for first in range(0, n, at_once):
            pending = []
            for i in range(first, min(n, first + at_once)):
                key = str(uuid.uuid4())
                request = protos.CreateOrderRequest(request_id=key, sku=f"sku-{i}", qty=1, amount=100)
                metadata = (("idempotency-key", key), ("x-client-id", f"c{i}"))
                pending.append(stub.CreateOrder.future(request, timeout=10, metadata=metadata))
            for f in pending:
                try:
                    f.result()
                    outcomes.append("OK")
                except grpc.RpcError as e:
                    outcomes.append(e.code().name)
    print(f"{os.path.basename(sys.argv[0])}: {n} calls: {dict(collections.Counter(outcomes))}", file=sys.stderr)
    sys.exit(0)


