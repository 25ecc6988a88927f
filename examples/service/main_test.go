package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScenario runs the demo's scenario over loopback with the client as
// it was and with sturdy: both end with one order and one charge, but only
// sturdy gets the order through on the caller's first try.
func TestScenario(t *testing.T) {
	tests := []struct {
		name         string
		client       func() *http.Client
		wantStatuses []int
		wantRuns     int64
	}{
		// 503, then the connection drops, then the stored charge: the
		// caller sees each failure, and the handler runs each time.
		{"legacy", legacyClient, []int{502, 502, 201, 201}, 3},
		// sturdy retries both faults beneath the service.
		{"sturdy", sturdyClient, []int{201, 201}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.client()
			defer c.CloseIdleConnections()
			o, err := scenario(io.Discard, c, 3)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.statuses, tt.wantStatuses) {
				t.Errorf("caller got %v, want %v", o.statuses, tt.wantStatuses)
			}
			if !o.replayed {
				t.Errorf("the repeated order was not a replay, want %s: true", idempotency.ReplayedHeader)
			}
			if o.orders != 1 || o.charges != 1 {
				t.Errorf("got %d orders and %d charges, want 1 and 1", o.orders, o.charges)
			}
			if o.runs != tt.wantRuns {
				t.Errorf("the order handler ran %d times, want %d", o.runs, tt.wantRuns)
			}
			if len(o.payments) != 3 {
				t.Errorf("payments got %d requests, want 3: %q", len(o.payments), o.payments)
			}
			for _, line := range o.payments {
				if !strings.Contains(line, "Idempotency-Key: charge-order-1001)") {
					t.Errorf("payments request %q, want every attempt keyed charge-order-1001", line)
				}
			}
		})
	}
}

// TestOrders checks the service's POST /orders behind idempotency.Handler
// with a healthy payments API.
func TestOrders(t *testing.T) {
	pay := httptestutil.NewPayments(httptestutil.PaymentsConfig{})
	paySrv := httptest.NewServer(pay)
	defer paySrv.Close()
	client := sturdyClient()
	defer client.CloseIdleConnections()
	svc := newOrders(client, paySrv.URL)
	srv := httptest.NewServer(svc.handler())
	defer srv.Close()
	caller := srv.Client()
	defer caller.CloseIdleConnections()

	const good = `{"item":"tea","amount":450,"currency":"eur"}`
	tests := []struct {
		name, key, body string
		wantStatus      int
		wantReplayed    bool
		wantCharges     int64
	}{
		{"first order", "k1", good, 201, false, 1},
		{"same key, same order: replayed", "k1", good, 201, true, 1},
		{"same key, another order", "k1", `{"item":"tea","amount":900,"currency":"eur"}`, 422, false, 1},
		{"no key", "", good, 400, false, 1},
		{"not an order", "k2", `{"item":""}`, 400, false, 1},
		{"not JSON", "k3", `<order/>`, 400, false, 1},
		{"another key", "k4", good, 201, false, 2},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		if tt.key != "" {
			req.Header.Set(idempotency.DefaultHeader, tt.key)
		}
		resp, err := caller.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.wantStatus {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.wantStatus)
		}
		if got := resp.Header.Get(idempotency.ReplayedHeader) == "true"; got != tt.wantReplayed {
			t.Errorf("%s: replayed %v, want %v", tt.name, got, tt.wantReplayed)
		}
		if got := pay.Charges(); got != tt.wantCharges {
			t.Errorf("%s: %d charges, want %d", tt.name, got, tt.wantCharges)
		}
	}
	if got := svc.created(); got != 2 {
		t.Errorf("%d orders made, want 2", got)
	}
}

// TestDemoOutput checks that the demo runs to its end and tells both
// stories.
func TestDemoOutput(t *testing.T) {
	var out strings.Builder
	if err := demo(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"&http.Client{Timeout: 10 * time.Second}",
		"transport.New(transport.Options{Timeout: 10 * time.Second, PropagateDeadline: true})",
		"the caller got 502, then 502, then 201, then 201.",
		"the caller got 201, then 201.",
		"Idempotent-Replayed: true",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDeadlineAcrossHops checks both ends of deadline propagation in the
// service: a caller that sends its deadline has it carried through the
// order to the payments call, which tells payments what is left of it;
// a caller whose deadline has passed is refused before anything runs.
func TestDeadlineAcrossHops(t *testing.T) {
	tests := []struct {
		name        string
		header      string // the caller's Request-Timeout; "" sends none
		wantStatus  int
		wantCharges int64
		wantMax     int64 // the largest Request-Timeout payments may see
	}{
		{"caller's 2s", "2000", http.StatusCreated, 1, 2000},
		{"no caller deadline: the outbound Timeout", "", http.StatusCreated, 1, outboundTimeout.Milliseconds()},
		{"caller's deadline passed", "0", http.StatusGatewayTimeout, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pay := httptestutil.NewPayments(httptestutil.PaymentsConfig{})
			var seen []string
			paySrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen = append(seen, r.Header.Get(idempotency.DefaultDeadlineHeader))
				pay.ServeHTTP(w, r)
			}))
			defer paySrv.Close()
			client := sturdyClient()
			defer client.CloseIdleConnections()
			svc := newOrders(client, paySrv.URL)
			srv := httptest.NewServer(svc.handler())
			defer srv.Close()
			caller := srv.Client()
			defer caller.CloseIdleConnections()

			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":"tea","amount":450,"currency":"eur"}`))
			req.Header.Set(idempotency.DefaultHeader, "order-7")
			if tt.header != "" {
				req.Header.Set(idempotency.DefaultDeadlineHeader, tt.header)
			}
			resp, err := caller.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("got status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if got := pay.Charges(); got != tt.wantCharges {
				t.Errorf("got %d charges, want %d", got, tt.wantCharges)
			}
			if int64(len(seen)) != tt.wantCharges {
				t.Fatalf("payments got %d requests, want %d", len(seen), tt.wantCharges)
			}
			for _, v := range seen {
				ms, err := strconv.ParseInt(v, 10, 64)
				// A loaded machine may take a second between the hops;
				// it cannot take the whole budget and still succeed.
				if err != nil || ms <= 0 || ms > tt.wantMax || ms < tt.wantMax-1000 {
					t.Errorf("payments saw %s: %q, want (%d, %d] ms", idempotency.DefaultDeadlineHeader, v, tt.wantMax-1000, tt.wantMax)
				}
			}
			if tt.wantStatus == http.StatusGatewayTimeout && svc.runs.Load() != 0 {
				t.Errorf("the order handler ran %d times, want 0", svc.runs.Load())
			}
		})
	}
}
