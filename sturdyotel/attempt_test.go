package sturdyotel

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// TestAttemptPropagatesItsSpan: the server sees the attempt's span as
// its parent, and the caller's request is left as it was.
func TestAttemptPropagatesItsSpan(t *testing.T) {
	p := newPipeline(t)
	tel := New(Options{TracerProvider: p.tp, MeterProvider: p.mp, Propagators: propagation.TraceContext{}})
	var got string
	srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Get("Traceparent") })
	c := &http.Client{Transport: transport.New(tel.Apply(transport.Options{Base: httptestutil.NewHandlerTransport(srv)}))}
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	spans := p.spans.Ended()
	if len(spans) != 1 {
		t.Fatalf("got %d spans, want 1", len(spans))
	}
	sc := spans[0].SpanContext()
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; got != want {
		t.Errorf("server got traceparent %q, want %q", got, want)
	}
	if h := req.Header.Get("Traceparent"); h != "" {
		t.Errorf("caller's request got traceparent %q, want none", h)
	}
}

// TestIdempotencyKeyPresenceNotValue: an attempt span says a key was
// sent, and no attribute anywhere carries the key itself.
func TestIdempotencyKeyPresenceNotValue(t *testing.T) {
	const key = "secret-key-4711"
	for _, keyed := range []bool{true, false} {
		p := newPipeline(t)
		srv := httptestutil.Status(201, "made")
		c := &http.Client{Transport: transport.New(p.telemetry().Apply(transport.Options{Base: httptestutil.NewHandlerTransport(srv)}))}
		req, _ := http.NewRequest(http.MethodPost, "http://api.test/charges", strings.NewReader("{}"))
		if keyed {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		spans := p.spans.Ended()
		if len(spans) != 1 {
			t.Fatalf("got %d spans, want 1", len(spans))
		}
		set := attribute.NewSet(spans[0].Attributes()...)
		present, found := set.Value(attrKeyPresent)
		if !found || present.AsBool() != keyed {
			t.Errorf("keyed %v: %s = %v (set %v), want %v", keyed, attrKeyPresent, present.AsBool(), found, keyed)
		}
		for _, kv := range spans[0].Attributes() {
			if strings.Contains(kv.Value.Emit(), key) {
				t.Errorf("attribute %s = %q carries the key", kv.Key, kv.Value.Emit())
			}
		}
	}
}

func TestRedactedURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://api.test/v1/things?page=2", "https://api.test/v1/things?page=2"},
		{"https://user:pw@api.test/", "https://REDACTED:REDACTED@api.test/"},
		{"https://token@api.test/", "https://REDACTED@api.test/"},
		{"https://s3.test/o?AWSAccessKeyId=AK&Signature=xyz&x=1", "https://s3.test/o?AWSAccessKeyId=REDACTED&Signature=REDACTED&x=1"},
		{"https://gcs.test/o?X-Goog-Signature=abc", "https://gcs.test/o?X-Goog-Signature=REDACTED"},
		{"https://blob.test/c?sig=abc&sv=2024", "https://blob.test/c?sig=REDACTED&sv=2024"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := redactedURL(u); got != tt.want {
			t.Errorf("redactedURL(%s) = %s, want %s", tt.in, got, tt.want)
		}
		if u.String() != tt.in {
			t.Errorf("redactedURL changed its argument to %s", u)
		}
	}
}

func TestMethodAndServer(t *testing.T) {
	tests := []struct {
		method, url          string
		wantMethod, wantOrig string
		wantName             string
		wantHost             string
		wantPort             int
	}{
		{"GET", "http://api.test/", "GET", "", "GET", "api.test", 80},
		{"", "https://api.test/", "GET", "", "GET", "api.test", 443},
		{"POST", "https://api.test:8443/", "POST", "", "POST", "api.test", 8443},
		{"PROPFIND", "http://[::1]:8080/", "_OTHER", "PROPFIND", "HTTP", "::1", 8080},
		{"get", "http://api.test/", "_OTHER", "get", "HTTP", "api.test", 80},
	}
	for _, tt := range tests {
		m, orig := methodAttrs(tt.method)
		if m.Value.AsString() != tt.wantMethod || orig.Value.AsString() != tt.wantOrig {
			t.Errorf("methodAttrs(%q) = %q, %q; want %q, %q", tt.method, m.Value.AsString(), orig.Value.AsString(), tt.wantMethod, tt.wantOrig)
		}
		if got := spanName(m); got != tt.wantName {
			t.Errorf("spanName(%q) = %q, want %q", tt.method, got, tt.wantName)
		}
		u, _ := url.Parse(tt.url)
		if host, port := serverOf(u); host != tt.wantHost || port != tt.wantPort {
			t.Errorf("serverOf(%s) = %s, %d; want %s, %d", tt.url, host, port, tt.wantHost, tt.wantPort)
		}
	}
}

// TestApplyKeepsHooks: Apply adds its hooks after the ones already set,
// which still run.
func TestApplyKeepsHooks(t *testing.T) {
	p := newPipeline(t)
	var mine int
	o := p.telemetry().Apply(transport.Options{
		Base:  httptestutil.NewHandlerTransport(httptestutil.Status(200, "ok")),
		Hooks: transport.Hooks{OnAttempt: func(policy.AttemptEvent) { mine++ }},
	})
	resp, err := (&http.Client{Transport: transport.New(o)}).Get("http://api.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if mine != 1 {
		t.Errorf("the caller's OnAttempt ran %d times, want 1", mine)
	}
	if got := p.metrics(t); !strings.Contains(got, MetricAttempts) {
		t.Errorf("metrics %q: want %s among them", got, MetricAttempts)
	}
}

// closeCounter counts CloseIdleConnections calls.
type closeCounter struct {
	http.RoundTripper
	closed int
}

func (c *closeCounter) CloseIdleConnections() { c.closed++ }

// TestCloseIdleConnectionsReachesBase: http.Client.CloseIdleConnections
// still reaches the base through the attempt layer.
func TestCloseIdleConnectionsReachesBase(t *testing.T) {
	p := newPipeline(t)
	base := &closeCounter{RoundTripper: httptestutil.NewHandlerTransport(nil)}
	c := &http.Client{Transport: transport.New(p.telemetry().Apply(transport.Options{Base: base}))}
	c.CloseIdleConnections()
	if base.closed != 1 {
		t.Errorf("base closed its idle connections %d times, want 1", base.closed)
	}
}

// TestApplyDefaultBase: a nil Base becomes the base transport.New would
// make, beneath the attempt layer.
func TestApplyDefaultBase(t *testing.T) {
	p := newPipeline(t)
	o := p.telemetry().Apply(transport.Options{})
	a, ok := o.Base.(*attemptTransport)
	if !ok {
		t.Fatalf("Base is %T, want the attempt layer", o.Base)
	}
	b, ok := a.next.(*http.Transport)
	if !ok {
		t.Fatalf("beneath the attempt layer: %T, want *http.Transport", a.next)
	}
	if b.MaxIdleConnsPerHost != transport.DefaultMaxIdleConnsPerHost || b.MaxResponseHeaderBytes != transport.DefaultMaxResponseHeaderBytes {
		t.Errorf("base keeps %d idle connections per host and %d header bytes, want %d and %d",
			b.MaxIdleConnsPerHost, b.MaxResponseHeaderBytes, transport.DefaultMaxIdleConnsPerHost, transport.DefaultMaxResponseHeaderBytes)
	}
}

// TestMiddlewareInChain: a stack built with Chain gets a span per
// attempt from Middleware placed just above the base.
func TestMiddlewareInChain(t *testing.T) {
	p := newPipeline(t)
	tel := p.telemetry()
	base := httptestutil.NewHandlerTransport(httptestutil.Script(httptestutil.Status(503, "busy"), httptestutil.Status(200, "ok")))
	c := &http.Client{Transport: transport.Chain(base,
		transport.Retry(policy.Retry{Backoff: policy.Exponential(0, 0)}),
		tel.Middleware())}
	resp, err := c.Get("http://api.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var got []string
	for _, s := range p.spans.Ended() {
		set := attribute.NewSet(s.Attributes()...)
		status, _ := set.Value("http.response.status_code")
		attempt, _ := set.Value(attrAttempt)
		got = append(got, s.Name()+" "+attempt.Emit()+" "+status.Emit())
	}
	if want := []string{"GET 1 503", "GET 2 200"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("spans %q, want %q", got, want)
	}
}
