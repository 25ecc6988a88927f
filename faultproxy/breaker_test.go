package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// breakerSettings returns the breaker comparison's settings: BreakerLong
// with FAULTPROXY=long, else BreakerShort.
func breakerSettings() Settings {
	if os.Getenv(LongEnv) == "long" {
		return BreakerLong
	}
	return BreakerShort
}

// breakerRow is one line of the breaker comparison: the default stack
// (on) and the same stack with Disable: transport.LayerBreaker (off), run
// side by side against the same fault.
type breakerRow struct {
	on, off Summary
	opens   int64         // times the default stack's breaker opened
	stall   time.Duration // the canary's longest wait for toxiproxy, see startCanary
}

// canary measures how long toxiproxy itself goes without answering:
// every 20 ms it sends a GET through a proxy without toxics to an
// upstream of its own, and keeps the longest time between two answers.
// Each GET opens a connection of its own, as the clients' attempts do
// (RequestsPerConn 1): a starved toxiproxy is slowest to accept and dial,
// and a kept-alive connection would not see that.
// On a machine overloaded enough to starve toxiproxy of CPU (load
// averages above 10 on 2 cores were seen) every proxy stops answering for
// a while, and a client cannot tell that from a host that went down.
type canary struct {
	longest atomic.Int64
	quit    chan struct{}
	done    chan struct{}
	close   func()
}

func startCanary(tp *Toxiproxy) (*canary, error) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	px, err := tp.Proxy(fmt.Sprintf("canary-%d", time.Now().UnixNano()), srv.Listener.Addr().String(), nil)
	if err != nil {
		srv.Close()
		return nil, err
	}
	tr := &http.Transport{DisableKeepAlives: true}
	client := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	c := &canary{quit: make(chan struct{}), done: make(chan struct{})}
	c.close = func() {
		tr.CloseIdleConnections()
		px.Delete()
		srv.Close()
	}
	go func() {
		defer close(c.done)
		last := time.Now()
		for {
			select {
			case <-c.quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
			resp, err := client.Get("http://" + px.Listen + "/")
			if err != nil {
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			now := time.Now()
			if gap := int64(now.Sub(last)); gap > c.longest.Load() {
				c.longest.Store(gap)
			}
			last = now
		}
	}()
	return c, nil
}

// stop ends the canary and returns the longest time it waited between
// two answers.
func (c *canary) stop() time.Duration {
	close(c.quit)
	<-c.done
	c.close()
	return time.Duration(c.longest.Load())
}

// TestFaultProxyBreaker runs the default stack and the same stack with
// its breaker switched off side by side (at the same time, each through
// a proxy of its own to an upstream of its own) against toxiproxy
// hanging or resetting 1%, 10% and 50% of connections, with vouched
// requests (a key, an upstream that deduplicates: failed attempts are
// retried) and unvouched ones (no key, an upstream that performs
// whatever arrives: an attempt that may have been acted on is not sent
// again).
//
// A host that fails a share of its requests is not down: the breaker
// must not open, so it refuses nothing, and the two stacks then differ
// in nothing but the faults' coin tosses. That is checked exactly (no
// open, no ErrCircuitOpen), with every promise of [Result.Check] (no
// duplicate side effect) for both stacks; the success rates are logged,
// and compared only against a bound that sampling noise cannot reach
// (one point plus four standard deviations of the difference), since a
// short run's rates differ by several points from the coin tosses alone.
func TestFaultProxyBreaker(t *testing.T) {
	tp := server(t)
	verifyNoLeaks(t)
	s := breakerSettings()
	var (
		mu   sync.Mutex
		rows = map[string]breakerRow{}
	)
	for _, vouched := range []bool{true, false} {
		s := s
		s.Vouched = vouched
		for _, ph := range BreakerFaults() {
			name := ph.Name + "/" + vouchedName(vouched)
			t.Run(name, func(t *testing.T) {
				cn, err := startCanary(tp)
				if err != nil {
					t.Fatal(err)
				}
				var opens atomic.Int64
				on := SturdyWith("sturdy", transport.Options{Hooks: transport.Hooks{
					OnBreakerStateChange: func(_ string, _, to transport.BreakerState) {
						if to == transport.BreakerOpen {
							opens.Add(1)
						}
					},
				}})
				off := SturdyWith("breaker off", transport.Options{Disable: transport.LayerBreaker})
				var (
					wg      sync.WaitGroup
					results [2]*Result
					errs    [2]error
				)
				for i, c := range []Client{on, off} {
					wg.Go(func() { results[i], errs[i] = Run(t.Context(), tp, ph, c, s) })
				}
				wg.Wait()
				stall := cn.stop()
				if err := errors.Join(errs[:]...); err != nil {
					t.Fatal(err)
				}
				row := breakerRow{on: results[0].Summarize(), off: results[1].Summarize(), opens: opens.Load(), stall: stall}
				mu.Lock()
				rows[name] = row
				mu.Unlock()
				for i, res := range results {
					if stall > res.Settings.Margin {
						// The canary, in this process, went that long without
						// an answer: this machine stopped everything for a
						// while, the client's own timers too, so deadlines are
						// judged no finer than that. Side effects and bodies
						// are judged as ever.
						t.Logf("deadlines judged with a margin of %v, the canary's longest silence, instead of %v", stall.Round(time.Millisecond), res.Settings.Margin)
						res.Settings.Margin = stall
					}
					if err := res.Check(); err != nil {
						t.Errorf("%s broke its promises:\n%v", []string{"sturdy", "breaker off"}[i], err)
					}
				}
				pOn, pOff := rate(row.on), rate(row.off)
				bound := 0.01 + 4*math.Sqrt((pOn*(1-pOn)+pOff*(1-pOff))/float64(s.Ops))
				t.Logf("ok %d/%d with the breaker, %d/%d without (%+.1f points; noise bound %.1f); breaker opened %d times; "+
					"connections %d and %d; failures %v and %v; toxiproxy's longest silence to the canary %v",
					row.on.OK, row.on.Ops, row.off.OK, row.off.Ops, 100*(pOn-pOff), 100*bound, row.opens,
					row.on.Conns, row.off.Conns, row.on.Failures, row.off.Failures, stall.Round(time.Millisecond))
				if row.opens != 0 && stall >= s.Attempt {
					// The proxy itself stopped answering (this machine is
					// overloaded and toxiproxy was starved of CPU): every
					// request failed for a while, fresh ones too, which is
					// what a breaker opens on. Not the breaker's doing.
					t.Logf("the breaker opened %d times while toxiproxy went %v without answering a healthy proxy: "+
						"the host did stop answering; not counted against the breaker", row.opens, stall.Round(time.Millisecond))
					return
				}
				if row.opens != 0 {
					t.Errorf("the breaker opened %d times, want 0: a host that fails %s of its connections is not down", row.opens, strings.Fields(ph.Name)[1])
				}
				if n := row.on.Failures["circuit open"]; n != 0 {
					t.Errorf("%d operations failed with ErrCircuitOpen, want 0", n)
				}
				if pOn < pOff-bound {
					t.Errorf("ok with the breaker = %.1f%%, want at least %.1f%% (breaker off) - %.1f points", 100*pOn, 100*pOff, 100*bound)
				}
			})
		}
	}
	t.Cleanup(func() { t.Logf("%s\n%s", breakerCaption(s), breakerTable(rows)) })
}

func rate(s Summary) float64 { return float64(s.OK) / float64(max(s.Ops, 1)) }

// breakerCaption describes the breaker comparison's settings.
func breakerCaption(s Settings) string {
	mode := "short"
	if s == BreakerLong {
		mode = "long"
	}
	return fmt.Sprintf("breaker comparison, %s run: %d operations per stack and row by %d workers (each at most one per %v), "+
		"%v deadline, %v per attempt, bodies of %d-%d KiB, one request per connection:",
		mode, s.Ops, s.Workers, s.Pace, s.Deadline, s.Attempt, s.MinBody>>10, s.MaxBody>>10)
}

// breakerTable formats the breaker comparison as a Markdown table.
func breakerTable(rows map[string]breakerRow) string {
	var b strings.Builder
	b.WriteString("| fault | requests | ok, breaker on | ok, breaker off | difference | breaker opened | failed fast | duplicates (on/off) | connections (on/off) | failed, on: why | failed, off: why | toxiproxy's longest silence |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |\n")
	for _, v := range []bool{true, false} {
		for _, ph := range BreakerFaults() {
			r, ok := rows[ph.Name+"/"+vouchedName(v)]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %d/%d (%.1f%%) | %d/%d (%.1f%%) | %+.1f | %d | %d | %d/%d | %d/%d | %s | %s | %d ms |\n",
				ph.Name, vouchedName(v), r.on.OK, r.on.Ops, 100*rate(r.on), r.off.OK, r.off.Ops, 100*rate(r.off),
				100*(rate(r.on)-rate(r.off)), r.opens, r.on.Failures["circuit open"], r.on.Duplicates, r.off.Duplicates,
				r.on.Conns, r.off.Conns, failures(r.on.Failures), failures(r.off.Failures), r.stall.Milliseconds())
		}
	}
	return b.String()
}

// TestFaultProxyBreakerTripsOnADownHost runs the default stack against a
// healthy upstream through toxiproxy, then takes the host down, either at
// the proxy (disabled: every dial is refused) or behind it (the upstream
// killed: the proxy accepts each connection and closes it, as a load
// balancer with no backend does), and checks that the breaker opens
// within a second and that later calls fail fast with ErrCircuitOpen.
// With the proxy enabled again, a call succeeds again; how soon is
// logged (TestNewRecoversAfterRestart in transport asserts it on
// loopback).
func TestFaultProxyBreakerTripsOnADownHost(t *testing.T) {
	tp := server(t)
	verifyNoLeaks(t)
	const (
		// 400 operations a second in all: a busy client. Enough workers
		// that those retrying a refused dial (after backoffs of up to
		// 100s of ms) do not hold the rest back.
		workers = 32
		pace    = 80 * time.Millisecond
		healthy = 500 * time.Millisecond
		down    = 1500 * time.Millisecond
	)
	s := Settings{Deadline: time.Second, Attempt: 250 * time.Millisecond, MinBody: 512, MaxBody: 512, Ops: 5000}
	tests := []struct {
		name    string
		down    func(px *toxiproxy.Proxy, up *Upstream) error
		restore func(px *toxiproxy.Proxy) error // nil: the host stays down
	}{
		{"proxy disabled", func(px *toxiproxy.Proxy, _ *Upstream) error { return px.Disable() }, (*toxiproxy.Proxy).Enable},
		{"upstream killed", func(_ *toxiproxy.Proxy, up *Upstream) error { up.Close(); return nil }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := NewUpstream(UpstreamOptions{RequestsPerConn: 4})
			defer up.Close()
			px, err := tp.Proxy(fmt.Sprintf("down-%d", time.Now().UnixNano()), up.Addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer px.Delete()
			url := "http://" + px.Listen + "/charges"

			var (
				opened     atomic.Int64 // Unix nanoseconds of the first open
				sent       atomic.Int64 // attempts that went out, not refused by the breaker
				sentAtOpen atomic.Int64
			)
			opened.Store(-1)
			client := SturdyWith("sturdy", transport.Options{Hooks: transport.Hooks{
				OnBreakerStateChange: func(_ string, _, to transport.BreakerState) {
					if to == transport.BreakerOpen && opened.CompareAndSwap(-1, time.Now().UnixNano()) {
						sentAtOpen.Store(sent.Load())
					}
				},
				OnAttempt: func(ev policy.AttemptEvent) {
					if !errors.Is(ev.Err, transport.ErrCircuitOpen) {
						sent.Add(1)
					}
				},
			}})
			do, release := client.New(s)
			ops := makeOps("down/"+tt.name, s)
			work := make(chan *Op)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for i := range workers {
				wg.Go(func() {
					time.Sleep(pace * time.Duration(i) / workers)
					for op := range work {
						next := time.Now().Add(pace)
						runOp(t.Context(), do, url, op, s)
						time.Sleep(time.Until(next))
					}
				})
			}
			feed := make(chan struct{})
			go func() {
				defer close(feed)
				defer close(work)
				for _, op := range ops {
					select {
					case work <- op:
					case <-stop:
						return
					}
				}
			}()
			finish := sync.OnceFunc(func() {
				close(stop)
				<-feed
				wg.Wait()
				release()
			})
			defer finish()

			time.Sleep(healthy)
			downAt := time.Now()
			sentAtDown := sent.Load()
			if err := tt.down(px, up); err != nil {
				t.Fatal(err)
			}
			downTook := time.Since(downAt)
			for time.Since(downAt) < down {
				time.Sleep(10 * time.Millisecond)
			}
			sentWhileDown := sent.Load() - sentAtDown
			var upAt time.Time
			if tt.restore != nil {
				if err := tt.restore(px); err != nil {
					t.Fatal(err)
				}
				upAt = time.Now()
				time.Sleep(time.Second)
			}
			finish()

			var okBefore, refused int
			var firstOK time.Time
			for _, op := range ops {
				if op.Start.IsZero() {
					continue
				}
				switch {
				case op.OK && op.End.Before(downAt):
					okBefore++
				case op.OK && !upAt.IsZero() && op.End.After(upAt):
					if firstOK.IsZero() || op.End.Before(firstOK) {
						firstOK = op.End
					}
				case errors.Is(op.Err, transport.ErrCircuitOpen):
					refused++
				}
				if n := up.Effects(op.ID); n > 1 {
					t.Errorf("%s: %d side effects, want at most 1", op.ID, n)
				}
			}
			if okBefore == 0 {
				t.Fatalf("no operation succeeded in the %v before the host went down", healthy)
			}
			at := opened.Load()
			if at < 0 {
				t.Fatalf("the breaker never opened in the %v the host was down (%d attempts sent)", down, sentWhileDown)
			}
			tripped := time.Unix(0, at).Sub(downAt)
			t.Logf("%d operations succeeded before; taking the host down took %v; the breaker opened %v after that began, after %d attempts; "+
				"%d attempts in all while down (probes included), %d operations failed fast",
				okBefore, downTook.Round(time.Millisecond), tripped.Round(time.Millisecond), sentAtOpen.Load()-sentAtDown, sentWhileDown, refused)
			if tripped > time.Second {
				t.Errorf("the breaker opened %v after the host went down, want within 1s", tripped)
			}
			if refused == 0 {
				t.Errorf("no operation failed fast with ErrCircuitOpen, want the later ones to")
			}
			if tt.restore != nil {
				if firstOK.IsZero() {
					t.Errorf("no operation succeeded within 1s of the proxy being enabled again")
				} else {
					t.Logf("first success %v after the proxy was enabled again", firstOK.Sub(upAt).Round(time.Millisecond))
				}
			}
		})
	}
}
