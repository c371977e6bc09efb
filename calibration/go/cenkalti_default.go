// github.com/cenkalti/backoff 4.1.3 as its README uses it: NewExponentialBackOff() with its
// defaults — InitialInterval 500 ms, RandomizationFactor 0.5, Multiplier 1.5 (exponential.go:76-78)
// — each wait the interval × U(0.5, 1.5) (exponential.go:115-119, 149-158), at most 4 attempts.
//
// Expected on first-two-503: jitter pass (±50 %, wider than equal jitter), key_stability pass (one
// key per operation), duplicates pass (attempt 3 creates the order).
package main

import "github.com/cenkalti/backoff"

func main() {
	fleet(40, func() backoff.BackOff {
		return backoff.WithMaxRetries(backoff.NewExponentialBackOff(), 3)
	})
}
