package transport

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sturdyhttp/sturdy/policy"
)

// bigHeaders is a loopback server whose responses carry n bytes of
// headers, counting the requests it gets.
func bigHeaders(t *testing.T, n int) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	v := strings.Repeat("x", n)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("X-Big", v)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// localFinalPins provoke each row of policy.LocalFinalOutcomes from real
// net/http, by row name, and return its error.
var localFinalPins = map[string]func(t *testing.T) error{
	"response headers too large": func(t *testing.T) error {
		srv, _ := bigHeaders(t, 4<<10)
		base := &http.Transport{MaxResponseHeaderBytes: 1 << 10}
		defer base.CloseIdleConnections()
		resp, err := (&http.Client{Transport: base}).Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	},
}

// Promise: the texts of net/http's local failures live in the one table
// of such texts, each row pinned by a test that provokes it from real
// net/http: a Go release that changes a text fails here.
func TestLocalFinalTablePinnedByNetHTTP(t *testing.T) {
	rows := policy.LocalFinalOutcomes()
	if len(rows) == 0 {
		t.Fatal("no local failure rows")
	}
	for _, row := range rows {
		pin := localFinalPins[row.Name]
		if pin == nil {
			t.Errorf("row %q has no test that provokes it from net/http", row.Name)
			continue
		}
		err := pin(t)
		if got, ok := policy.LocalFinal(err); !ok || got.Name != row.Name {
			t.Errorf("net/http's error %v is row %q (%v), want row %q", err, got.Name, ok, row.Name)
		}
		if _, ok := policy.NotProcessed(err); ok {
			t.Errorf("net/http's error %v proves the request unprocessed, want not", err)
		}
	}
}

// Promise: a failure of the client that no retry can fix is final: sent
// once, not retried, and the error says so. The bare client beside the
// stack fails too: the stack is never worse.
func TestLocalFailuresAreFinal(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T) (stackErr, bareErr error, hits int32)
	}{
		{"response headers over the base's limit", func(t *testing.T) (error, error, int32) {
			srv, hits := bigHeaders(t, 4<<10)
			base := &http.Transport{MaxResponseHeaderBytes: 1 << 10}
			defer base.CloseIdleConnections()
			_, err := (&http.Client{Transport: New(Options{Base: base})}).Get(srv.URL)
			n := hits.Load()
			_, berr := (&http.Client{Transport: base}).Get(srv.URL)
			return err, berr, n
		}},
		{"response headers over the default base's limit", func(t *testing.T) (error, error, int32) {
			srv, hits := bigHeaders(t, DefaultMaxResponseHeaderBytes+1)
			rt := New(Options{})
			defer rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
			_, err := (&http.Client{Transport: rt}).Get(srv.URL)
			n := hits.Load()
			base := &http.Transport{MaxResponseHeaderBytes: DefaultMaxResponseHeaderBytes}
			defer base.CloseIdleConnections()
			_, berr := (&http.Client{Transport: base}).Get(srv.URL)
			return err, berr, n
		}},
		{"a base that returns (nil, nil)", func(t *testing.T) (error, error, int32) {
			var hits atomic.Int32
			base := Func(func(r *http.Request) (*http.Response, error) {
				hits.Add(1)
				return nil, nil
			})
			_, err := (&http.Client{Transport: New(Options{Base: base})}).Get("http://api.test/")
			n := hits.Load()
			_, berr := (&http.Client{Transport: base}).Get("http://api.test/")
			return err, berr, n
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err, berr, hits := tt.run(t)
			if berr == nil {
				t.Errorf("the bare client succeeded, the stack failed with %v", err)
			}
			var re *RetryError
			if !errors.As(err, &re) || re.Attempts != 1 || re.Reason != policy.ReasonFinal {
				t.Fatalf("err = %v, want a *RetryError, final after 1 attempt", err)
			}
			if hits != 1 {
				t.Errorf("sent %d times, want once", hits)
			}
		})
	}
}
