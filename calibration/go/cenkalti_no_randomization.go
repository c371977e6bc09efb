// github.com/cenkalti/backoff 4.1.3 with RandomizationFactor 0: "make sure no randomness is used
// when randomizationFactor is 0" (exponential.go:150-151): every client waits exactly 500 ms, then
// 750 ms (Multiplier 1.5), at most 4 attempts.
//
// Expected on first-two-503: jitter fail, key_stability pass, duplicates pass.
package main

import "github.com/cenkalti/backoff"

func main() {
	fleet(40, func() backoff.BackOff {
		b := backoff.NewExponentialBackOff()
		b.RandomizationFactor = 0
		return backoff.WithMaxRetries(b, 3)
	})
}
