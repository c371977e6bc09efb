"""grpcio 1.85.3 with a retryPolicy on UNAVAILABLE, as gRPC's retry guide writes it: maxAttempts 4,
initialBackoff 0.1 s, maxBackoff 1 s, backoffMultiplier 2.

Expected (gRFC A6, as C-core implements it): grpc-unavailable — attempts 2 and 3 carry
grpc-previous-rpc-attempts 1 and 2, attempt 3 creates the order: grpc_attempts pass, duplicates
pass; grpc-invalid-argument — INVALID_ARGUMENT is not retryable: grpc_non_retryable pass;
grpc-pushback — the retry waits the server's 1.5 s pushback: grpc_pushback pass, grpc_attempts pass;
grpc-committed — headers came before UNAVAILABLE, the call is committed, no retry: grpc_committed
pass, duplicates pass.
"""
from grpc_calls import method_config, run

run(method_config(retryPolicy={
    "maxAttempts": 4,
    "initialBackoff": "0.1s",
    "maxBackoff": "1s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}))
