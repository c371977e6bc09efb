// @grpc/grpc-js 1.14.7 with a retryPolicy on UNAVAILABLE: maxAttempts 4, initialBackoff 0.1 s,
// maxBackoff 1 s, backoffMultiplier 2.
// Expected: grpc-unavailable grpc_attempts pass (retrying-call.js:561-566 sets
// grpc-previous-rpc-attempts to attempts - 1), duplicates pass; grpc-invalid-argument
// grpc_non_retryable pass; grpc-pushback grpc_pushback pass (retrying-call.js:354-356 waits the
// pushback in place of the backoff), grpc_attempts pass; grpc-committed grpc_committed pass
// (retrying-call.js:569-574 commits the call when its headers arrive), duplicates pass.
import { methodConfig, run } from './grpc_calls.mjs';

await run(methodConfig({
  retryPolicy: {
    maxAttempts: 4, initialBackoff: '0.1s', maxBackoff: '1s', backoffMultiplier: 2,
    retryableStatusCodes: ['UNAVAILABLE'],
  },
}));
