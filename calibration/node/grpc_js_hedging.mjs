// @grpc/grpc-js 1.14.7 with a hedgingPolicy on the create call: maxAttempts 2, hedgingDelay 0.1 s.
// Expected: grpc-js hedges (retrying-call.js:145-147, 531-545: a new attempt every hedgingDelay
// while none has answered), so against a store that ignores keys the hedge makes a second order:
// grpc-hedging-none duplicates fail; against an idempotent store (grpc-hedging-unique) the hedge is
// answered with the same order: duplicates pass.
import { methodConfig, run } from './grpc_calls.mjs';

await run(methodConfig({
  hedgingPolicy: { maxAttempts: 2, hedgingDelay: '0.1s', nonFatalStatusCodes: ['UNAVAILABLE'] },
}));
