package bench

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// cancelKinds are the clients of the cancellation table.
var cancelKinds = allKinds

// closeWatcher is a handler that hangs until the client goes away and
// records, for each request, how long after the caller's deadline (sent
// in the query as ?dl=unix-nanoseconds) the server saw the connection
// close.
type closeWatcher struct {
	mu   sync.Mutex
	lags []time.Duration
}

func (s *closeWatcher) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dl, err := strconv.ParseInt(r.URL.Query().Get("dl"), 10, 64)
	if err != nil {
		http.Error(w, "bench: no dl", http.StatusBadRequest)
		return
	}
	<-r.Context().Done()
	lag := time.Since(time.Unix(0, dl))
	s.mu.Lock()
	s.lags = append(s.lags, lag)
	s.mu.Unlock()
}

// quantile returns the q quantile of sorted d (nearest rank).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// cancelOps and cancelWorkers shape BenchmarkCancel: 1,000 operations,
// 8 at a time, each with a caller deadline of cancelAfter.
const (
	cancelOps     = 1000
	cancelWorkers = 8
	cancelAfter   = 20 * time.Millisecond
)

// BenchmarkCancel measures how soon a caller's deadline reaches the
// server: each operation calls a loopback server that never answers,
// with a context whose deadline is 20 ms away; the server notes when it
// sees the connection close. It reports the p50, p99 and max of that lag
// over 1,000 operations (run it with -benchtime=1x: each iteration is the
// whole set), and missed: operations whose close the server never saw
// (per 1,000).
func BenchmarkCancel(b *testing.B) {
	for _, k := range cancelKinds {
		b.Run("client="+k.name, func(b *testing.B) {
			var lags []time.Duration
			var missed int
			for b.Loop() {
				l, m := runCancel(b, k)
				lags = append(lags, l...)
				missed += m
			}
			slices.Sort(lags)
			us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
			b.ReportMetric(us(quantile(lags, 0.50)), "p50-us")
			b.ReportMetric(us(quantile(lags, 0.99)), "p99-us")
			b.ReportMetric(us(quantile(lags, 1)), "max-us")
			b.ReportMetric(float64(missed)*1000/float64(len(lags)+missed), "missed/1kop")
		})
	}
}

// runCancel runs cancelOps operations of kind k against a fresh
// closeWatcher and returns the lags the server saw and how many
// operations it did not see close.
func runCancel(tb testing.TB, k clientKind) ([]time.Duration, int) {
	w := &closeWatcher{}
	srv := newLoopback(tb, w)
	base := cleanhttp.DefaultPooledTransport()
	defer base.CloseIdleConnections()
	c := k.new(clientConfig{base: base})
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	for range cancelWorkers {
		wg.Go(func() {
			for range jobs {
				dl := time.Now().Add(cancelAfter)
				ctx, cancel := context.WithDeadline(context.Background(), dl)
				o := op{method: http.MethodGet, url: srv.URL + "/hang?dl=" + strconv.FormatInt(dl.UnixNano(), 10)}
				if _, err := c.do(ctx, o); err == nil {
					tb.Errorf("%s: got no error from a server that never answers", c.name)
				}
				cancel()
			}
		})
	}
	for range cancelOps {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	srv.Close() // waits for every handler to return
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lags, cancelOps - len(w.lags)
}
