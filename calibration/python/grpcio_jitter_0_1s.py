"""grpcio 1.85.3, 20 calls released together on one channel, with a retryPolicy on UNAVAILABLE as
gRPC's retry guide writes it but an initialBackoff of 0.1 s: maxAttempts 3, maxBackoff 10 s,
backoffMultiplier 2.

Expected (grpc-jitter: attempts 1-2 of every call UNAVAILABLE): jitter weak — C-core waits the
backoff × U(0.8, 1.2) (its BackOff's jitter 0.2; measured 80–120 ms on 0.1 s by a server that is
not this project's): real, proportional jitter, narrower than equal jitter.
"""
from grpc_calls import method_config, run

run(method_config(retryPolicy={
    "maxAttempts": 3,
    "initialBackoff": "0.1s",
    "maxBackoff": "10s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}), default_calls=20)
