"""grpcio 1.85.3 with a hedgingPolicy on the create call: maxAttempts 2, hedgingDelay 0.1 s.

Expected: C-core does not implement hedging (gRFC A6's header: "Implemented in: ... C-Core except
hedging"), so the policy is not acted on and each call is sent once: on grpc-hedging-none duplicates
pass (one order per key) — where grpc-js, which hedges, creates two.
"""
from grpc_calls import method_config, run

run(method_config(hedgingPolicy={
    "maxAttempts": 2,
    "hedgingDelay": "0.1s",
    "nonFatalStatusCodes": ["UNAVAILABLE"],
}))
