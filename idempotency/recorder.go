package idempotency

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// recorder is the ResponseWriter the inner handler writes to. It tees:
// everything goes through to the client at once, as without the
// middleware, and is also kept, up to limit bytes of body, to be stored.
// It keeps http.Flusher and http.Hijacker working, and Unwrap lets
// [http.ResponseController] reach the connection's other features.
type recorder struct {
	w         http.ResponseWriter
	limit     int64
	run       *runState
	cacheable func(status int) bool

	status   int         // 0 until the header is written
	header   http.Header // snapshot taken when the header was written
	body     []byte
	over     bool // the body passed limit, so it is not kept
	hijacked bool
	// sniffLen is len(body) when a flush sent the header: net/http sniffs
	// a Content-Type from those bytes only. -1 when no flush came first.
	sniffLen int
}

func (c *recorder) Header() http.Header { return c.w.Header() }

func (c *recorder) WriteHeader(code int) {
	if c.status == 0 && !c.hijacked {
		if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
			c.w.WriteHeader(code) // informational: not the response
			return
		}
		c.status = code
		if code >= 400 && !c.run.nothingDone.Load() && c.cacheable(code) && !hasDirective(c.w.Header()) {
			// Kept, so a retry gets this again: say that retrying is futile.
			c.w.Header().Set(stripeShouldRetry, "false")
		}
		c.header = storedHeader(c.w.Header())
		if n, err := strconv.ParseInt(c.w.Header().Get("Content-Length"), 10, 64); err == nil && n > 0 && n <= c.limit {
			c.body = make([]byte, 0, n)
		}
	}
	c.w.WriteHeader(code)
}

func (c *recorder) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !c.over {
		if int64(len(c.body))+int64(len(p)) > c.limit {
			c.over, c.body = true, nil
		} else {
			c.body = append(c.body, p...)
		}
	}
	return c.w.Write(p)
}

// FlushError flushes the client's connection, as [http.ResponseController]
// does.
func (c *recorder) FlushError() error {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	err := http.NewResponseController(c.w).Flush()
	if err == nil && c.sniffLen < 0 {
		c.sniffLen = len(c.body)
	}
	return err
}

// Flush implements [http.Flusher].
func (c *recorder) Flush() { c.FlushError() }

// Hijack implements [http.Hijacker]. A hijacked response is not stored.
func (c *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(c.w).Hijack()
	if err == nil {
		c.hijacked = true
	}
	return conn, rw, err
}

// Unwrap returns the client's ResponseWriter, for [http.ResponseController].
func (c *recorder) Unwrap() http.ResponseWriter { return c.w }

// nothingDoneFor marks the run whose recorder is w, or is reached from w
// through Unwrap, as having done nothing.
func nothingDoneFor(w http.ResponseWriter) {
	for w != nil {
		if c, ok := w.(*recorder); ok {
			c.run.nothingDone.Store(true)
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// released reports whether the run's answer says that nothing was done:
// a status that Cacheable refuses, or an error response with a retry
// directive of true, which claims the server did not act. A hijacked
// connection says nothing.
func (c *recorder) released() bool {
	if c.hijacked {
		return false
	}
	status := c.status
	if status == 0 {
		status = http.StatusOK
	}
	if !c.cacheable(status) {
		return true
	}
	if status < 400 || c.header == nil {
		return false
	}
	for _, name := range directiveHeaders {
		if strings.EqualFold(strings.TrimSpace(c.header.Get(name)), "true") {
			return true
		}
	}
	return false
}

// stripeShouldRetry is the header in which a server tells the client
// whether a retry can help, as Stripe does; OpenAI and Anthropic send
// X-Should-Retry. Both are read by policy.DefaultClassifier.
const stripeShouldRetry = "Stripe-Should-Retry"

var directiveHeaders = [...]string{"X-Should-Retry", stripeShouldRetry}

// hasDirective reports whether h carries a retry directive of the
// handler's own.
func hasDirective(h http.Header) bool {
	for _, name := range directiveHeaders {
		if h.Get(name) != "" {
			return true
		}
	}
	return false
}

// result returns the response to store, and false when there is none to
// store: the connection was hijacked, the status is 101, or the body was
// over the limit.
func (c *recorder) result() (*StoredResponse, bool) {
	if c.hijacked || c.over {
		return nil, false
	}
	if c.status == 0 { // next wrote nothing: net/http sends 200
		c.status = http.StatusOK
		c.header = storedHeader(c.w.Header())
	}
	if c.status == http.StatusSwitchingProtocols {
		return nil, false
	}
	h := c.header
	// Store the Content-Type net/http sniffs when the handler sets none,
	// under the same conditions and from the same bytes, those it had
	// when it sent the header (net/http's chunkWriter.writeHeader).
	sniff := c.body
	if c.sniffLen >= 0 {
		sniff = c.body[:c.sniffLen]
	}
	_, ok := h["Content-Type"]
	if !ok && len(sniff) > 0 && bodyAllowed(c.status) &&
		c.w.Header().Get("Transfer-Encoding") == "" && h.Get("Content-Encoding") == "" {
		h["Content-Type"] = []string{http.DetectContentType(sniff)}
	} else if !ok && len(sniff) == 0 && len(c.body) > 0 {
		// Flushed before the body: net/http sent no Content-Type. A
		// present but empty value keeps the replay from sniffing one.
		h["Content-Type"] = nil
	}
	if _, ok := h["Content-Length"]; !ok && bodyAllowed(c.status) {
		h["Content-Length"] = []string{strconv.Itoa(len(c.body))}
	}
	body := c.body
	if cap(body)-len(body) > len(body)/8 {
		body = bytes.Clone(body) // do not keep append's spare capacity
	}
	return &StoredResponse{Status: c.status, Header: h, Body: body}, true
}

// storedHeader returns a copy of h without what must not be replayed:
// hop-by-hop headers (RFC 9110 §7.6.1) and those named by Connection,
// Date, and trailers.
func storedHeader(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		if hopHeader(k) || strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		out[k] = append([]string(nil), vs...)
	}
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			delete(out, textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name)))
		}
	}
	return out
}

func hopHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Date":
		return true
	}
	return false
}

// bodyAllowed reports whether a response with status may have a body
// (RFC 9110 §6.4.1), as net/http decides.
func bodyAllowed(status int) bool {
	switch {
	case status >= 100 && status <= 199:
		return false
	case status == http.StatusNoContent, status == http.StatusNotModified:
		return false
	}
	return true
}
