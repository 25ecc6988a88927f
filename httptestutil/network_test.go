package httptestutil

import (
	"context"
	"errors"
	"io"
	"net/http"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNetworkVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		srv := n.Serve("api.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Minute)
			io.WriteString(w, "late")
		}))
		defer srv.Close()
		tr := n.Transport()
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		start := time.Now()
		resp, err := c.Get(srv.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got, want := string(b), "late"; got != want {
			t.Errorf("body = %q, want %q", got, want)
		}
		if got, want := time.Since(start), time.Minute; got != want {
			t.Errorf("elapsed = %v, want %v", got, want)
		}
		if got, want := n.Dials(), int64(1); got != want {
			t.Errorf("dials = %d, want %d", got, want)
		}
	})
}

func TestNetworkRefused(t *testing.T) {
	n := NewNetwork()
	_, err := n.DialContext(context.Background(), "tcp", "nobody.test:80")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial error = %v, want ECONNREFUSED", err)
	}
}

func TestNetworkCancelReachesServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		gone := make(chan time.Time, 1)
		srv := n.Serve("hang.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			gone <- time.Now()
		}))
		defer srv.Close()
		tr := n.Transport()
		defer tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		start := time.Now()
		_, err := (&http.Client{Transport: tr}).Do(req)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if got, want := (<-gone).Sub(start), 3*time.Second; got != want {
			t.Errorf("server saw disconnect after %v, want %v", got, want)
		}
	})
}
