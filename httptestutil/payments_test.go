package httptestutil

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type payResult struct {
	status   int
	replayed string
	ctype    string
	body     string
}

func pay(t *testing.T, c *http.Client, url, key, body string) payResult {
	t.Helper()
	res, err := payCtx(context.Background(), c, url, key, body)
	if err != nil {
		t.Fatalf("POST %s/charges: %v", url, err)
	}
	return res
}

func payCtx(ctx context.Context, c *http.Client, url, key, body string) (payResult, error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/charges", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return payResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return payResult{resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), resp.Header.Get("Content-Type"), string(b)}, err
}

func TestPaymentsSequence(t *testing.T) {
	const eur = `{"amount":1000,"currency":"eur"}`
	const charged = `{"amount":1000,"currency":"eur","id":"ch_1","status":"succeeded"}` + "\n"
	tests := []struct {
		key, body  string
		wantStatus int
		wantReplay string
		wantBody   string // exact, or for problems a substring
	}{
		{"k1", eur, 201, "", charged},
		{"k1", eur, 201, "true", charged},
		{"k1", `{"amount":1,"currency":"eur"}`, 422, "", "different payload"},
		{"", eur, 400, "", "Idempotency-Key is missing"},
		{"k2", `{"amount":0,"currency":"eur"}`, 400, "", "Invalid charge"},
		{"k2", `not json`, 400, "", "Invalid charge"},
		{"k2", `{"amount":5,"currency":"usd"}`, 201, "", `"id":"ch_2"`}, // a rejected body did not take the key
	}
	forEachBed(t, func() http.Handler { return NewPayments(PaymentsConfig{}) }, func(t *testing.T, b bed, c *http.Client, url string) {
		for i, tt := range tests {
			got := pay(t, c, url, tt.key, tt.body)
			if got.status != tt.wantStatus || got.replayed != tt.wantReplay {
				t.Errorf("request %d: status %d replayed %q, want %d %q", i, got.status, got.replayed, tt.wantStatus, tt.wantReplay)
			}
			if tt.wantStatus >= 400 {
				if got.ctype != "application/problem+json" || !strings.Contains(got.body, tt.wantBody) {
					t.Errorf("request %d: %s %q, want application/problem+json containing %q", i, got.ctype, got.body, tt.wantBody)
				}
			} else if !strings.Contains(got.body, tt.wantBody) {
				t.Errorf("request %d: body %q, want %q", i, got.body, tt.wantBody)
			}
		}
	})
}

func TestPaymentsStats(t *testing.T) {
	p := NewPayments(PaymentsConfig{Header: "X-Key"})
	c := &http.Client{Transport: NewHandlerTransport(p)}
	send := func(key, body string) int {
		req, _ := http.NewRequest("POST", "http://pay.test/charges", strings.NewReader(body))
		if key != "" {
			req.Header.Set("X-Key", key)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const b = `{"amount":1,"currency":"eur"}`
	for _, s := range []struct {
		key, body string
		want      int
	}{{"a", b, 201}, {"a", b, 201}, {"a", b, 201}, {"a", `{"amount":2,"currency":"eur"}`, 422}, {"", b, 400}, {"b", b, 201}} {
		if got := send(s.key, s.body); got != s.want {
			t.Errorf("key %q: status %d, want %d", s.key, got, s.want)
		}
	}
	want := PaymentsStats{Charges: 2, Replays: 2, Mismatches: 1, MissingKeys: 1}
	if got := p.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
	if got := p.Charges(); got != 2 {
		t.Errorf("Charges() = %d, want 2", got)
	}
	for _, r := range []struct {
		method, path string
		want         int
	}{{"GET", "/charges", 405}, {"POST", "/refunds", 404}} {
		req, _ := http.NewRequest(r.method, "http://pay.test"+r.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != r.want {
			t.Errorf("%s %s: status %d, want %d", r.method, r.path, resp.StatusCode, r.want)
		}
	}
}

func TestPaymentsTooBig(t *testing.T) {
	p := NewPayments(PaymentsConfig{})
	c := &http.Client{Transport: NewHandlerTransport(p)}
	got := pay(t, c, "http://pay.test", "k", `{"amount":1,"currency":"`+strings.Repeat("e", maxChargeBody)+`"}`)
	if got.status != 413 {
		t.Errorf("status %d, want 413", got.status)
	}
}

func TestPaymentsInFlight(t *testing.T) {
	const body = `{"amount":700,"currency":"eur"}`
	for _, b := range beds {
		if !b.virtual {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			p := NewPayments(PaymentsConfig{ProcessingDelay: 2 * time.Second})
			b.run(t, p, func(t *testing.T, c *http.Client, url string) {
				first := make(chan payResult)
				go func() { first <- pay(t, c, url, "k", body) }()
				time.Sleep(time.Second)
				if got := pay(t, c, url, "k", body); got.status != 409 || !strings.Contains(got.body, "still being processed") {
					t.Errorf("same key in flight: %d %q, want 409", got.status, got.body)
				}
				if got := pay(t, c, url, "k", `{"amount":1,"currency":"eur"}`); got.status != 422 {
					t.Errorf("other payload in flight: %d, want 422", got.status)
				}
				if got := <-first; got.status != 201 {
					t.Errorf("first: %d, want 201", got.status)
				}
				if got := pay(t, c, url, "k", body); got.status != 201 || got.replayed != "true" {
					t.Errorf("after: %d replayed %q, want 201 true", got.status, got.replayed)
				}
				if got := p.Stats(); got.Charges != 1 || got.Conflicts != 1 || got.Replays != 1 {
					t.Errorf("Stats() = %+v, want 1 charge, 1 conflict, 1 replay", got)
				}
			})
		})
	}
}

func TestPaymentsChargeSurvivesClientTimeout(t *testing.T) {
	const body = `{"amount":700,"currency":"eur"}`
	for _, b := range beds {
		if !b.virtual {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			p := NewPayments(PaymentsConfig{ProcessingDelay: 2 * time.Second})
			b.run(t, p, func(t *testing.T, c *http.Client, url string) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if _, err := payCtx(ctx, c, url, "k", body); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err = %v, want DeadlineExceeded", err)
				}
				time.Sleep(5 * time.Second)
				if got := p.Charges(); got != 1 {
					t.Errorf("Charges() = %d after the client left, want 1 (the server acted)", got)
				}
				got := pay(t, c, url, "k", body)
				var charge struct{ ID string }
				json.Unmarshal([]byte(got.body), &charge)
				if got.status != 201 || got.replayed != "true" || charge.ID != "ch_1" {
					t.Errorf("retry: %d replayed %q id %q, want 201 true ch_1", got.status, got.replayed, charge.ID)
				}
			})
		})
	}
}

func TestPaymentsConcurrentSameKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPayments(PaymentsConfig{ProcessingDelay: time.Second})
		n := NewNetwork()
		srv := n.Serve("pay.test", p)
		defer srv.Close()
		tr := n.Transport()
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		var mu sync.Mutex
		statuses := map[int]int{}
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				got := pay(t, c, srv.URL, "same", `{"amount":1,"currency":"eur"}`)
				mu.Lock()
				statuses[got.status]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if statuses[201] != 1 || statuses[409] != 19 {
			t.Errorf("statuses = %v, want map[201:1 409:19]", statuses)
		}
		if got := p.Charges(); got != 1 {
			t.Errorf("Charges() = %d, want 1", got)
		}
	})
}

// Every error is an RFC 9457 problem, the router's own included: a path
// the API does not have (404) and a method /charges does not take (405,
// with Allow).
func TestPaymentsErrorsAreProblems(t *testing.T) {
	p := NewPayments(PaymentsConfig{})
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"POST", "/charges", 400, ""}, // no key
		{"POST", "/refunds", 404, ""},
		{"GET", "/", 404, ""},
		{"GET", "/charges", 405, "POST"},
	} {
		w := httptest.NewRecorder()
		p.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, strings.NewReader(`{}`)))
		var pb ProblemBody
		err := json.Unmarshal(w.Body.Bytes(), &pb)
		if ct := w.Header().Get("Content-Type"); w.Code != tc.status || ct != "application/problem+json" || err != nil || pb.Status != tc.status {
			t.Errorf("%s %s: %d %q %q; want %d with a problem+json body", tc.method, tc.path, w.Code, ct, strings.TrimSpace(w.Body.String()), tc.status)
		}
		if got := w.Header().Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow = %q; want %q", tc.method, tc.path, got, tc.allow)
		}
	}
}
