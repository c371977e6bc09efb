// github.com/cenkalti/backoff 4.1.3 with RandomizationFactor 0.2 (the width gRPC's clients use):
// each wait the interval × U(0.8, 1.2) (exponential.go:115-119, 149-158), InitialInterval 200 ms,
// Multiplier 2, at most 4 attempts.
//
// Expected on first-two-503: jitter weak (±20 %, proportional jitter narrower than equal jitter),
// key_stability pass, duplicates pass.
package main

import (
	"time"

	"github.com/cenkalti/backoff"
)

func main() {
	fleet(40, func() backoff.BackOff {
		b := backoff.NewExponentialBackOff()
		b.InitialInterval = 200 * time.Millisecond
		b.RandomizationFactor = 0.2
		b.Multiplier = 2
		return backoff.WithMaxRetries(b, 3)
	})
}
