package transport_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// A host's requests in flight are bounded; a request that finds the bound
// full waits while its time allows, then fails unsent. Here the bound is
// pinned to one request to show it.
func ExampleConcurrency() {
	arrived, release := make(chan struct{}), make(chan struct{})
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			<-release
		}
		w.Write([]byte("ok"))
	})
	client := &http.Client{Transport: transport.New(transport.Options{
		Base:        httptestutil.NewHandlerTransport(api),
		Concurrency: &policy.Concurrency{Initial: 1, Min: 1, Max: 1},
	})}

	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := client.Get("http://api.test/slow"); err == nil {
			resp.Body.Close()
		}
	}()
	<-arrived // the one slot is taken

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/fast", nil)
	_, err := client.Do(req)
	fmt.Println("refused:", errors.Is(err, transport.ErrConcurrencyLimit))
	fmt.Println("out of time:", errors.Is(err, context.DeadlineExceeded))
	var ce *transport.ConcurrencyLimitError
	if errors.As(err, &ce) {
		fmt.Println("host:", ce.Host, "limit:", ce.Limit)
	}
	close(release)
	<-done
	// Output:
	// refused: true
	// out of time: true
	// host: http://api.test limit: 1
}
