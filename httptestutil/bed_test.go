package httptestutil

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
)

// bed is a way to put a handler under a client: on the in-memory network
// or through a HandlerTransport inside a synctest bubble (virtual is true:
// elapsed times are exact), or on real loopback.
type bed struct {
	name    string
	virtual bool
	run     func(t *testing.T, h http.Handler, f func(t *testing.T, c *http.Client, url string))
}

var beds = []bed{
	{"network", true, func(t *testing.T, h http.Handler, f func(*testing.T, *http.Client, string)) {
		synctest.Test(t, func(t *testing.T) {
			n := NewNetwork()
			srv := n.Serve("api.test", h)
			defer srv.Close()
			tr := n.Transport()
			defer tr.CloseIdleConnections()
			f(t, &http.Client{Transport: tr}, srv.URL)
		})
	}},
	{"handler", true, func(t *testing.T, h http.Handler, f func(*testing.T, *http.Client, string)) {
		synctest.Test(t, func(t *testing.T) {
			f(t, &http.Client{Transport: NewHandlerTransport(h)}, "http://api.test")
		})
	}},
	{"loopback", false, func(t *testing.T, h http.Handler, f func(*testing.T, *http.Client, string)) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		c := srv.Client()
		defer c.CloseIdleConnections()
		f(t, c, srv.URL)
	}},
}

// forEachBed runs f as a subtest on every bed.
func forEachBed(t *testing.T, h func() http.Handler, f func(t *testing.T, b bed, c *http.Client, url string)) {
	t.Helper()
	for _, b := range beds {
		t.Run(b.name, func(t *testing.T) {
			b.run(t, h(), func(t *testing.T, c *http.Client, url string) { f(t, b, c, url) })
		})
	}
}
