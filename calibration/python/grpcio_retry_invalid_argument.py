"""grpcio 1.85.3 with INVALID_ARGUMENT wrongly listed as retryable beside UNAVAILABLE.

Expected: grpc-invalid-argument — the call is sent again after INVALID_ARGUMENT (A6 retries every
code in retryableStatusCodes): grpc_non_retryable fail.
"""
from grpc_calls import method_config, run

run(method_config(retryPolicy={
    "maxAttempts": 3,
    "initialBackoff": "0.1s",
    "maxBackoff": "1s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE", "INVALID_ARGUMENT"],
}))
