package transport

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// h2 frame types and error codes (RFC 9113) that rawH2 speaks.
const (
	h2Data         = 0x0
	h2Headers      = 0x1
	h2RSTStream    = 0x3
	h2Settings     = 0x4
	h2EndStream    = 0x1
	h2Ack          = 0x1
	h2ProtocolErr  = 0x1
	h2ClientPrefix = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// rawH2 is an HTTP/2 server over TLS on loopback, written frame by
// frame, that acts on every complete request (its END_STREAM seen),
// counting it in acted, then resets its stream with RST_STREAM carrying
// code (PROTOCOL_ERROR: as a proxy does when its upstream's answer is
// malformed). It returns its URL and a transport that trusts it.
func rawH2(t *testing.T, code uint32, acted *atomic.Int64) (string, *http.Transport) {
	t.Helper()
	certSrv := httptest.NewUnstartedServer(http.NotFoundHandler())
	certSrv.EnableHTTP2 = true
	certSrv.StartTLS()
	cert := certSrv.TLS.Certificates[0]
	pool := x509.NewCertPool()
	pool.AddCert(certSrv.Certificate())
	certSrv.Close()

	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serveRawH2(c, code, acted)
			}()
		}
	}()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return "https://" + ln.Addr().String(), tr
}

func serveRawH2(c net.Conn, code uint32, acted *atomic.Int64) {
	preface := make([]byte, len(h2ClientPrefix))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != h2ClientPrefix {
		return
	}
	write := func(typ, flags byte, stream uint32, payload []byte) error {
		var h [9]byte
		h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
		h[3], h[4] = typ, flags
		binary.BigEndian.PutUint32(h[5:], stream)
		_, err := c.Write(append(h[:], payload...))
		return err
	}
	if write(h2Settings, 0, 0, nil) != nil {
		return
	}
	for {
		var h [9]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		typ, flags, stream := h[3], h[4], binary.BigEndian.Uint32(h[5:])&0x7fffffff
		if _, err := io.CopyN(io.Discard, c, int64(n)); err != nil {
			return
		}
		switch {
		case typ == h2Settings && flags&h2Ack == 0:
			if write(h2Settings, h2Ack, 0, nil) != nil {
				return
			}
		case (typ == h2Headers || typ == h2Data) && flags&h2EndStream != 0:
			acted.Add(1)
			var p [4]byte
			binary.BigEndian.PutUint32(p[:], code)
			if write(h2RSTStream, 0, stream, p[:]) != nil {
				return
			}
		}
	}
}

// Promise: a request is sent more than once only when that is safe, and
// that holds for net/http's own replays too. An HTTP/2 server that got a
// POST nobody vouched for and acted on it, then reset its stream with
// PROTOCOL_ERROR (which, unlike REFUSED_STREAM, does not say that the
// stream went unprocessed), is sent the POST once: net/http's HTTP/2
// transport replays such a stream by itself whenever the request has a
// GetBody, which the stack must not hand it for a request that may not
// be sent twice.
func TestUnvouchedPostResetWithProtocolErrorSentOnceOverHTTP2(t *testing.T) {
	bodies := []struct {
		name string
		body func() io.Reader
	}{
		{"strings.Reader", func() io.Reader { return strings.NewReader(`{"sku":"a"}`) }}, // NewRequest sets GetBody
		{"bare reader", func() io.Reader { return io.MultiReader(strings.NewReader(`{"sku":"a"}`)) }},
	}
	// Retry's three ways to send: attempts that may be retried, one
	// attempt with hooks, and one attempt without (its shortcut).
	stacks := []struct {
		name string
		o    Options
	}{
		{"default", Options{}},
		{"one attempt with hooks", Options{Retry: policy.Retry{MaxAttempts: 1}, Hooks: Hooks{OnAttempt: func(policy.AttemptEvent) {}}}},
		{"one attempt", Options{Retry: policy.Retry{MaxAttempts: 1}}},
	}
	for _, st := range stacks {
		for _, b := range bodies {
			t.Run(st.name+"/"+b.name, func(t *testing.T) {
				var acted atomic.Int64
				u, base := rawH2(t, h2ProtocolErr, &acted)
				o := st.o
				o.Base, o.Timeout = base, time.Second
				c := loopbackStack(t, o)
				req, _ := http.NewRequest("POST", u+"/orders", b.body())
				getBody := req.GetBody
				resp, err := c.Do(req)
				if err == nil {
					resp.Body.Close()
					t.Errorf("got status %d, want an error", resp.StatusCode)
				}
				time.Sleep(50 * time.Millisecond) // a copy that is still on its way
				if got, want := acted.Load(), int64(1); got != want {
					t.Errorf("side effect performed %d times, want %d (err = %v)", got, want, err)
				}
				if (req.GetBody == nil) != (getBody == nil) {
					t.Errorf("the caller's request lost or gained its GetBody")
				}
			})
		}
	}
}
