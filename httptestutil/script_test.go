package httptestutil

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

// fakeTB records failures of the Want helpers so their messages can be
// tested.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func serveStatus(h http.Handler, method, target string) (int, string) {
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(method, target, nil))
	return rr.Code, rr.Body.String()
}

func TestScriptOrder(t *testing.T) {
	tests := []struct {
		name          string
		steps         []Step
		want          []int
		wantPending   int
		wantExhausted int
	}{
		{"times then forever",
			[]Step{Status(503, "").Times(2), Status(429, ""), Status(200, "").Forever(), Status(418, "")},
			[]int{503, 503, 429, 200, 200, 200}, 0, 0},
		{"runs out", []Step{Status(500, ""), Status(200, "")},
			[]int{500, 200, StatusScriptExhausted, StatusScriptExhausted}, 0, 2},
		{"pending", []Step{Status(500, "").Times(3), Status(200, "")},
			[]int{500}, 3, 0},
		{"times zero and zero step are skipped", []Step{Status(500, "").Times(0), {}, Status(204, "").Times(-1), Status(200, "")},
			[]int{200, StatusScriptExhausted}, 0, 1},
		{"empty script", nil, []int{StatusScriptExhausted}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Script(tt.steps...)
			for i, want := range tt.want {
				if got, _ := serveStatus(s, "GET", "/x"); got != want {
					t.Errorf("request %d: status %d, want %d", i+1, got, want)
				}
			}
			if got := s.Pending(); got != tt.wantPending {
				t.Errorf("Pending() = %d, want %d", got, tt.wantPending)
			}
			if got := s.Exhausted(); got != tt.wantExhausted {
				t.Errorf("Exhausted() = %d, want %d", got, tt.wantExhausted)
			}
			if got, want := s.Served(), len(tt.want)-tt.wantExhausted; got != want {
				t.Errorf("Served() = %d, want %d", got, want)
			}
		})
	}
}

func TestScriptExhaustedMessage(t *testing.T) {
	s := Script()
	code, body := serveStatus(s, "POST", "/charges?x=1")
	if code != StatusScriptExhausted {
		t.Errorf("status = %d, want %d", code, StatusScriptExhausted)
	}
	if want := "httptestutil: script exhausted (request 1: POST /charges?x=1)\n"; body != want {
		t.Errorf("body = %q, want %q", body, want)
	}
}

func TestScriptWantHelpers(t *testing.T) {
	tests := []struct {
		name     string
		requests int
		want     []string // substrings of the failures, in order
	}{
		{"done", 2, nil},
		{"pending", 1, []string{"1 request(s) still pending after 1 served"}},
		{"too many", 3, []string{"1 request(s) arrived after the script ran out"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Script(Status(503, ""), Status(200, ""))
			for range tt.requests {
				serveStatus(s, "GET", "/")
			}
			tb := &fakeTB{}
			s.WantDone(tb)
			if len(tb.errors) != len(tt.want) {
				t.Fatalf("failures = %q, want %d", tb.errors, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(tb.errors[i], w) {
					t.Errorf("failure %d = %q, want it to contain %q", i, tb.errors[i], w)
				}
			}
			tb = &fakeTB{}
			s.WantServed(tb, min(tt.requests, 2))
			if len(tb.errors) != 0 {
				t.Errorf("WantServed failures = %q, want none", tb.errors)
			}
			s.WantServed(tb, 5)
			if len(tb.errors) != 1 {
				t.Errorf("WantServed(5) failures = %q, want 1", tb.errors)
			}
		})
	}
}

func TestScriptConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := Script(Status(200, "").Times(40), Status(503, "").Times(10))
		n := NewNetwork()
		srv := n.Serve("api.test", s)
		defer srv.Close()
		tr := n.Transport()
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		var mu sync.Mutex
		counts := map[int]int{}
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				resp, err := c.Get(srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				counts[resp.StatusCode]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if counts[200] != 40 || counts[503] != 10 || len(counts) != 2 {
			t.Errorf("statuses = %v, want map[200:40 503:10]", counts)
		}
		s.WantDone(t)
	})
}

func TestStepString(t *testing.T) {
	tests := []struct {
		step Step
		want string
	}{
		{Status(503, ""), "Status(503)"},
		{Status(503, "").Times(3), "Status(503)×3"},
		{Hang().Forever(), "Hang×∞"},
		{Delay(2e9, Reset()), "Delay(2s, Reset)"},
		{Step{}, "Step×0"},
	}
	for _, tt := range tests {
		if got := tt.step.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}
