// @grpc/grpc-js 1.14.7 with INVALID_ARGUMENT wrongly listed as retryable beside UNAVAILABLE.
// Expected: grpc-invalid-argument grpc_non_retryable fail (retrying-call.js:385-430 retries every
// code in retryableStatusCodes).
import { methodConfig, run } from './grpc_calls.mjs';

await run(methodConfig({
  retryPolicy: {
    maxAttempts: 3, initialBackoff: '0.1s', maxBackoff: '1s', backoffMultiplier: 2,
    retryableStatusCodes: ['UNAVAILABLE', 'INVALID_ARGUMENT'],
  },
}));
