// @grpc/grpc-js 1.14.7, 20 calls released together on one channel, with a retryPolicy on
// UNAVAILABLE as gRPC's retry guide writes it but an initialBackoff of 0.2 s: maxAttempts 3,
// maxBackoff 10 s, backoffMultiplier 2.
// Expected (grpc-jitter: attempts 1-2 of every call UNAVAILABLE): jitter weak — retrying-call.js:322
// draws `Math.random() * (1.2 - 0.8) + 0.8` and l. 331 waits that times the backoff: ±20 %,
// real, proportional jitter, narrower than equal jitter.
import { methodConfig, run } from './grpc_calls.mjs';

await run(methodConfig({
  retryPolicy: {
    maxAttempts: 3, initialBackoff: '0.2s', maxBackoff: '10s', backoffMultiplier: 2,
    retryableStatusCodes: ['UNAVAILABLE'],
  },
}), 20);
