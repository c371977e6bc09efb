// Shared by the Go calibration programs: N goroutines, released together, each doing one
// logical operation — POST $HARNESS_FAULT_URL/orders with a JSON body, an Idempotency-Key made
// once and `x-client-id: c<i>` — under the retry of github.com/cenkalti/backoff (Debian's
// golang-github-cenkalti-backoff-dev, 4.1.3) as the program configures it. A 5xx or a transport
// error is retried; a 4xx is permanent. Exits 0 whatever the outcomes (the harness judges the
// journal); a one-line summary goes to stderr.
//
// Run (what calibration/run.sh does): GO111MODULE=off GOPATH=/usr/share/gocode \
//   go run calibration/go/PROGRAM.go calibration/go/fleet.go
//
// Env: HARNESS_FAULT_URL (set by `harness exec` and `harness conform`); the fleet size is
// HARNESS_CALLS (set by `harness conform`), else CALIB_CLIENTS, else the program's default; at most
// HARNESS_CONCURRENCY operations run at once when it is set (else all of them).
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff"
)

func newKey() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// envInt is the first of the variables `names` set to an integer, else `def`.
func envInt(def int, names ...string) int {
	for _, name := range names {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
			return v
		}
	}
	return def
}

// fleet runs the operations with the backoff policy `policy` makes for each one.
func fleet(defaultClients int, policy func() backoff.BackOff) {
	n := envInt(defaultClients, "HARNESS_CALLS", "CALIB_CLIENTS")
	atOnce := envInt(n, "HARNESS_CONCURRENCY")
	if atOnce < 1 {
		atOnce = 1
	}
	slots := make(chan struct{}, atOnce)
	url := strings.TrimRight(os.Getenv("HARNESS_FAULT_URL"), "/") + "/orders"
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n},
	}
	start := make(chan struct{})
	outcomes := make([]string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			key := newKey()
			body := []byte(fmt.Sprintf(`{"sku":"sku-%d","qty":1}`, i))
			<-start
			slots <- struct{}{}
			defer func() { <-slots }()
			op := func() error {
				req, err := http.NewRequest("POST", url, bytes.NewReader(body))
				if err != nil {
					return backoff.Permanent(err)
				}
				req.Header.Set("content-type", "application/json")
				req.Header.Set("idempotency-key", key)
				req.Header.Set("x-client-id", fmt.Sprintf("c%d", i))
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				outcomes[i] = strconv.Itoa(resp.StatusCode)
				switch {
				case resp.StatusCode >= 500:
					return fmt.Errorf("HTTP %d", resp.StatusCode)
				case resp.StatusCode >= 400:
					return backoff.Permanent(fmt.Errorf("HTTP %d", resp.StatusCode))
				}
				return nil
			}
			if err := backoff.Retry(op, policy()); err != nil && outcomes[i] == "" {
				outcomes[i] = "error"
			}
		}(i)
	}
	close(start)
	wg.Wait()
	counts := map[string]int{}
	for _, o := range outcomes {
		counts[o]++
	}
	fmt.Fprintf(os.Stderr, "%s: %d operations: %v\n", filepath.Base(os.Args[0]), n, counts)
}
