// @grpc/grpc-js 1.14.7 with no service config: no retryPolicy and no hedgingPolicy, so each call is
// sent once (build/src/retrying-call.js:148-151: state TRANSPARENT_ONLY, maxAttempts 1).
// Expected: grpc-unavailable grpc_attempts and duplicates inconclusive; grpc-invalid-argument
// grpc_non_retryable pass; grpc-hedging-none duplicates pass.
import { run } from './grpc_calls.mjs';

await run(null);
