"""grpcio 1.85.3 with no service config: no retryPolicy, so no retry (gRFC A6: "If neither is set,
RPCs will not be retried or hedged"; only transparent retries of calls that never reached the
server's application).

Expected: on grpc-unavailable grpc_attempts and duplicates inconclusive (one failed attempt per call,
nothing created); on grpc-invalid-argument grpc_non_retryable pass; on grpc-hedging-none duplicates
pass (one attempt, one order).
"""
from grpc_calls import run

run(None)
