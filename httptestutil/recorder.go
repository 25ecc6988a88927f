package httptestutil

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"
)

// MaxRecordedBody is how many bytes of a request body a [Recorder] keeps.
// The rest of a longer body still reaches the next handler, unrecorded.
const MaxRecordedBody = 1 << 20

// RecordedRequest is what a [Recorder] saw of one request.
type RecordedRequest struct {
	// Method is the request method.
	Method string
	// URL is the request URL as the server parsed it (path and query).
	URL *url.URL
	// Host is the Host header.
	Host string
	// Header is a copy of the request header.
	Header http.Header
	// Body is the request body, at most [MaxRecordedBody] bytes.
	Body []byte
	// BodyTruncated reports whether the body was longer than Body.
	BodyTruncated bool
	// BodyErr is the error that ended reading the body early, as when
	// the client went away mid-body; nil when the body was read to its end.
	BodyErr error
	// RemoteAddr is the client address the server saw.
	RemoteAddr string
	// Arrived is when the request reached the recorder.
	Arrived time.Time
	// Finished is when the next handler returned; zero while it runs.
	Finished time.Time
	// Disconnected is when the request's context ended while the next
	// handler was still running: the client went away (cancelled, timed
	// out, closed the connection) or the server shut down. Zero when the
	// handler finished first; otherwise never after Finished.
	Disconnected time.Time
}

// Recorder is an [http.Handler] that records every request that reaches
// it, then passes it to the next handler. It reads each request body
// (up to [MaxRecordedBody]) before the next handler runs and hands the
// next handler the same bytes.
//
// Plug [Recorder.ConnState] into the server to count connections:
//
//	srv := httptest.NewUnstartedServer(rec)
//	srv.Config.ConnState = rec.ConnState
//	srv.Start()
//
// or, on a [Network]: n.Start(addr, &http.Server{Handler: rec, ConnState: rec.ConnState}).
//
// A Recorder is safe for concurrent use by multiple goroutines.
type Recorder struct {
	next http.Handler

	mu          sync.Mutex
	reqs        []RecordedRequest
	inFlight    int
	maxInFlight int
	newConns    int
}

// NewRecorder returns a Recorder in front of next. A nil next answers
// 200 with an empty body.
func NewRecorder(next http.Handler) *Recorder {
	if next == nil {
		next = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	}
	return &Recorder{next: next}
}

// ServeHTTP records r and passes it to the next handler.
func (rc *Recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	body, truncated, bodyErr := readBody(r)
	u := *r.URL
	if r.URL.User != nil {
		u.User = new(url.Userinfo)
		*u.User = *r.URL.User
	}
	rec := RecordedRequest{
		Method:        r.Method,
		URL:           &u,
		Host:          r.Host,
		Header:        r.Header.Clone(),
		Body:          body,
		BodyTruncated: truncated,
		BodyErr:       bodyErr,
		RemoteAddr:    r.RemoteAddr,
		Arrived:       arrived,
	}
	if rec.Header == nil {
		rec.Header = http.Header{}
	}

	rc.mu.Lock()
	i := len(rc.reqs)
	rc.reqs = append(rc.reqs, rec)
	rc.inFlight++
	rc.maxInFlight = max(rc.maxInFlight, rc.inFlight)
	running := true
	rc.mu.Unlock()

	// Watch for the client going away without a goroutine per request:
	// AfterFunc runs only if the context ends.
	disconnected := make(chan struct{})
	stop := context.AfterFunc(r.Context(), func() {
		defer close(disconnected)
		now := time.Now()
		rc.mu.Lock()
		if running {
			rc.reqs[i].Disconnected = now
		}
		rc.mu.Unlock()
	})

	defer func() {
		// A context that ended before the handler returned means the
		// client went away while it ran (a server ends the context of a
		// finished request only after the handler returns).
		gone := r.Context().Err() != nil
		finished := time.Now()
		if !gone {
			rc.mu.Lock()
			running = false
			rc.mu.Unlock()
		}
		if !stop() {
			<-disconnected
		}
		rc.mu.Lock()
		running = false
		// The context ended before finished, but the watcher may have run
		// after it (its goroutine is scheduled late), or never: the context
		// can end, and a handler waiting on Done return, before the context
		// package has started the watcher, and then stop wins. Either way
		// the disconnect was seen no later than finished.
		if d := rc.reqs[i].Disconnected; gone && (d.IsZero() || d.After(finished)) {
			rc.reqs[i].Disconnected = finished
		}
		rc.reqs[i].Finished = finished
		rc.inFlight--
		rc.mu.Unlock()
	}()
	rc.next.ServeHTTP(w, r)
}

// readBody reads r's body up to MaxRecordedBody and puts back a body that
// yields the same bytes, then the rest (or the read error).
func readBody(r *http.Request) (body []byte, truncated bool, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, false, nil
	}
	body, err = io.ReadAll(io.LimitReader(r.Body, MaxRecordedBody+1))
	if len(body) > MaxRecordedBody {
		truncated = true
		rest := body[MaxRecordedBody:]
		body = body[:MaxRecordedBody:MaxRecordedBody]
		r.Body = readCloser{io.MultiReader(bytes.NewReader(body), bytes.NewReader(rest), r.Body), r.Body}
		return body, truncated, err
	}
	if err != nil {
		r.Body = readCloser{io.MultiReader(bytes.NewReader(body), errReader{err}), r.Body}
		return body, false, err
	}
	r.Body = readCloser{bytes.NewReader(body), r.Body}
	return body, false, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// ConnState counts new connections; assign it to [http.Server.ConnState].
func (rc *Recorder) ConnState(_ net.Conn, s http.ConnState) {
	if s != http.StateNew {
		return
	}
	rc.mu.Lock()
	rc.newConns++
	rc.mu.Unlock()
}

// Requests returns a copy of the requests recorded so far, in arrival
// order.
func (rc *Recorder) Requests() []RecordedRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]RecordedRequest(nil), rc.reqs...)
}

// Count reports how many requests have arrived.
func (rc *Recorder) Count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.reqs)
}

// InFlight reports how many requests the next handler is serving now.
func (rc *Recorder) InFlight() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.inFlight
}

// MaxInFlight reports the most requests the next handler served at once.
func (rc *Recorder) MaxInFlight() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.maxInFlight
}

// NewConns reports how many connections the server accepted, as seen by
// [Recorder.ConnState]; 0 if ConnState is not plugged in.
func (rc *Recorder) NewConns() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.newConns
}

// WantCount fails t unless exactly n requests arrived.
func (rc *Recorder) WantCount(t testing.TB, n int) {
	t.Helper()
	if got := rc.Count(); got != n {
		t.Errorf("httptestutil: server got %d request(s), want %d%s", got, n, rc.summary())
	}
}

// WantMaxInFlight fails t if more than n requests were served at once.
func (rc *Recorder) WantMaxInFlight(t testing.TB, n int) {
	t.Helper()
	if got := rc.MaxInFlight(); got > n {
		t.Errorf("httptestutil: server served %d request(s) at once, want at most %d", got, n)
	}
}

// WantNewConns fails t unless exactly n connections were opened.
func (rc *Recorder) WantNewConns(t testing.TB, n int) {
	t.Helper()
	if got := rc.NewConns(); got != n {
		t.Errorf("httptestutil: server accepted %d connection(s), want %d", got, n)
	}
}

// WantSameHeader fails t unless every recorded request carries header key
// with one and the same non-empty value (an idempotency key across
// retries, a trace id), and returns that value.
func (rc *Recorder) WantSameHeader(t testing.TB, key string) string {
	t.Helper()
	reqs := rc.Requests()
	if len(reqs) == 0 {
		t.Errorf("httptestutil: no request recorded, want %s on each", key)
		return ""
	}
	first := reqs[0].Header.Get(key)
	if first == "" {
		t.Errorf("httptestutil: request 1 has no %s header, want one", key)
		return ""
	}
	for i, r := range reqs[1:] {
		if got := r.Header.Get(key); got != first {
			t.Errorf("httptestutil: request %d has %s %q, want %q as on request 1", i+2, key, got, first)
		}
	}
	return first
}

// summary lists the recorded requests for a failure message.
func (rc *Recorder) summary() string {
	reqs := rc.Requests()
	if len(reqs) == 0 {
		return ""
	}
	var b bytes.Buffer
	b.WriteString(":")
	for i, r := range reqs {
		if i == 10 {
			b.WriteString("\n\t...")
			break
		}
		b.WriteString("\n\t" + r.Method + " " + r.URL.RequestURI() + " at " + r.Arrived.Format(time.RFC3339Nano))
	}
	return b.String()
}
