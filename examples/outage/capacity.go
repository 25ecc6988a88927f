package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// capacityConfig is the second part of the program: no outage, but more
// demand than the server can serve.
type capacityConfig struct {
	Workers  int           // the server's workers
	Service  time.Duration // the time a worker takes for one request
	Load     float64       // the demand, as a multiple of the server's capacity; 0 skips the part
	WarmUp   time.Duration // arrivals before the measured period, not counted
	Run      time.Duration // the measured period
	Deadline time.Duration // each operation's deadline, all attempts included
	Backoff  time.Duration // first wait of the fixed-backoff client
}

// capacity is the requests a second the server can serve.
func (c capacityConfig) capacity() float64 {
	return float64(c.Workers) / c.Service.Seconds()
}

func defaultCapacityConfig() capacityConfig {
	return capacityConfig{
		Workers:  8,
		Service:  20 * time.Millisecond,
		Load:     2,
		WarmUp:   500 * time.Millisecond,
		Run:      1500 * time.Millisecond,
		Deadline: 250 * time.Millisecond,
		Backoff:  100 * time.Millisecond,
	}
}

func (c capacityConfig) validate() error {
	switch {
	case c.Load < 0:
		return errors.New("outage: -overload must not be negative")
	case c.Load > 0 && (c.Run <= 0 || c.Deadline <= 0):
		return errors.New("outage: -overload-run and -overload-deadline must be positive")
	}
	return nil
}

// describeCapacity says in one line what the client of kind k does in
// the second part.
func describeCapacity(k kind, c capacityConfig) string {
	if k == kindSturdy {
		return fmt.Sprintf("transport.New(transport.Options{Timeout: %v, Concurrency: &policy.Concurrency{}})", c.Deadline)
	}
	return k.describe(config{Backoff: c.Backoff})
}

// capacityResult is what the callers of one kind got, and what the
// server did, in the measured period.
type capacityResult struct {
	kind      kind
	ops, ok   int
	refused   int             // refused by sturdy's concurrency limit, unsent
	lat       []time.Duration // of the operations that succeeded, sorted
	served    int64           // requests the server's workers served, in the whole run
	abandoned int64           // of which, for callers who had left
}

// runCapacity sends operations arriving at c.Load times the server's
// capacity (a Poisson process: callers do not wait for each other)
// through a client of kind k, to a server of c.Workers workers behind a
// queue that keeps working for callers who left.
func runCapacity(ctx context.Context, c capacityConfig, k kind, nw network) (capacityResult, error) {
	ln, err := nw.listen()
	if err != nil {
		return capacityResult{}, fmt.Errorf("outage: listening: %w", err)
	}
	url := "http://" + ln.Addr().String() + "/v1/work"
	w := httptestutil.NewWorkers(c.Workers, c.Service)
	srv := &http.Server{Handler: w, ErrorLog: log.New(io.Discard, "", 0)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()

	base := cleanhttp.DefaultPooledTransport()
	base.MaxIdleConnsPerHost = transport.DefaultMaxIdleConnsPerHost
	if nw.dial != nil {
		base.DialContext = nw.dial
	}
	hc := &http.Client{Transport: base}
	if k == kindSturdy {
		hc.Transport = transport.New(transport.Options{Base: base, Timeout: c.Deadline, Concurrency: &policy.Concurrency{}})
	}
	call := func(ctx context.Context) error {
		switch k {
		case kindNaive:
			return retryNaive(ctx, hc, url)
		case kindBackoff:
			return retryBackoff(ctx, hc, url, c.Backoff)
		}
		return get(ctx, hc, url)
	}

	res := capacityResult{kind: k}
	var mu sync.Mutex
	var wg sync.WaitGroup
	rate := c.Load * c.capacity()
	start := time.Now()
	next := start
	for ctx.Err() == nil {
		next = next.Add(time.Duration(rand.ExpFloat64() / rate * float64(time.Second)))
		at := next.Sub(start)
		if at >= c.WarmUp+c.Run {
			break
		}
		if !pause(ctx, time.Until(next)) {
			break
		}
		measured := at >= c.WarmUp
		wg.Go(func() {
			octx, cancel := context.WithTimeout(ctx, c.Deadline)
			defer cancel()
			t0 := time.Now()
			err := call(octx)
			took := time.Since(t0)
			if !measured {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			res.ops++
			switch {
			case err == nil:
				res.ok++
				res.lat = append(res.lat, took)
			case errors.Is(err, transport.ErrConcurrencyLimit):
				res.refused++
			}
		})
	}
	wg.Wait()
	res.served, res.abandoned = w.Served()
	base.CloseIdleConnections()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-served
	w.Close()
	slices.Sort(res.lat)
	return res, nil
}

// printCapacity writes the second part's table.
func printCapacity(out io.Writer, c capacityConfig, rs []capacityResult) {
	row := func(label string, cell func(r capacityResult) string) {
		line := fmt.Sprintf("%-52s", label)
		for _, r := range rs {
			line += fmt.Sprintf("%16s", cell(r))
		}
		fmt.Fprintln(out, strings.TrimRight(line, " "))
	}
	row("", func(r capacityResult) string { return r.kind.String() })
	row("  operations that succeeded", func(r capacityResult) string { return pct(r.ok, r.ops) })
	row("  successful operations a second", func(r capacityResult) string {
		return fmt.Sprintf("%.0f", float64(r.ok)/c.Run.Seconds())
	})
	row("    as a share of what the server can serve", func(r capacityResult) string {
		return fmt.Sprintf("%.0f%%", 100*float64(r.ok)/c.Run.Seconds()/c.capacity())
	})
	row("  latency p50 | p99 of those that succeeded", func(r capacityResult) string {
		if len(r.lat) == 0 {
			return "-"
		}
		return ms(percentile(r.lat, 0.50)) + " | " + ms(percentile(r.lat, 0.99))
	})
	row("  refused at once, unsent (concurrency limit) [6]", func(r capacityResult) string { return pct(r.refused, r.ops) })
	row("  server work spent on callers who had left", func(r capacityResult) string {
		return pct(int(r.abandoned), int(max(r.served, 1)))
	})
	fmt.Fprintln(out)
	var st capacityResult
	for _, r := range rs {
		if r.kind == kindSturdy {
			st = r
		}
	}
	fmt.Fprintf(out, "sturdy's callers got %.0f successful operations a second, %.0f%% of what the server can serve.\n",
		float64(st.ok)/c.Run.Seconds(), 100*float64(st.ok)/c.Run.Seconds()/c.capacity())
	fmt.Fprintln(out, "[6] transport.ErrConcurrencyLimit: the host's adaptive limit of requests in flight was full and the operation's")
	fmt.Fprintln(out, "    time did not allow it to wait for a slot. The other clients send every request, and the server's queue")
	fmt.Fprintln(out, "    grows until it serves mostly callers who have given up.")
	fmt.Fprintln(out)
}
