package stripe

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"

	stripesdk "github.com/stripe/stripe-go/v85"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

// sentKeys is an http.RoundTripper above sturdy that records the
// Idempotency-Key of each request the SDK hands to its HTTP client.
type sentKeys struct {
	next http.RoundTripper
	mu   sync.Mutex
	keys []string
}

func (s *sentKeys) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	s.mu.Unlock()
	return s.next.RoundTrip(r)
}

func TestPaymentIntentThroughDroppedResponse(t *testing.T) {
	tests := []struct {
		name string
		// callerKey, when set, is the caller's own key
		// (Params.SetIdempotencyKey); otherwise the SDK makes one.
		callerKey string
		// disable switches layers of sturdy's stack off.
		disable transport.Layer
		// wantErr: the call fails (the response was lost and not retried).
		wantErr      bool
		wantRequests int
	}{
		{name: "the SDK's own key", wantRequests: 2},
		{name: "the caller's key", callerKey: "order-42-payment", wantRequests: 2},
		{name: "without sturdy's retry the payment is made but the call fails", disable: transport.LayerRetry, wantErr: true, wantRequests: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				emu := &paymentIntents{}
				api := stripeAPI(emu)
				// The first response is lost after the emulator acted.
				rec := httptestutil.NewRecorder(httptestutil.Script(
					httptestutil.CutAfter(api),
					httptestutil.Handler(api).Forever(),
				))
				n := httptestutil.NewNetwork()
				srv := n.Serve("api.stripe.test", rec)
				defer srv.Close()
				base := n.Transport()
				defer base.CloseIdleConnections()

				client := NewClient("sk_test_emulator", transport.Options{Base: base, Disable: tt.disable}, stripesdk.BackendConfig{
					URL:           stripesdk.String(srv.URL),
					LeveledLogger: &stripesdk.LeveledLogger{Level: stripesdk.LevelNull},
				})
				// Record the keys the SDK sends, above sturdy.
				be := client.V1PaymentIntents.B.(*stripesdk.BackendImplementation)
				sent := &sentKeys{next: be.HTTPClient.Transport}
				be.HTTPClient.Transport = sent

				params := &stripesdk.PaymentIntentCreateParams{
					Amount:   stripesdk.Int64(2000),
					Currency: stripesdk.String(string(stripesdk.CurrencyUSD)),
				}
				if tt.callerKey != "" {
					params.SetIdempotencyKey(tt.callerKey)
				}
				pi, err := client.V1PaymentIntents.Create(context.Background(), params)

				if got := emu.created.Load(); got != 1 {
					t.Errorf("emulator created %d payment intents, want exactly 1", got)
				}
				if got := rec.Count(); got != tt.wantRequests {
					t.Errorf("emulator got %d requests, want %d", got, tt.wantRequests)
				}
				if len(sent.keys) != 1 {
					t.Fatalf("the SDK sent %d requests, want 1 (its retries are off)", len(sent.keys))
				}
				sdkKey := sent.keys[0]
				if tt.callerKey != "" && sdkKey != tt.callerKey {
					t.Errorf("the SDK sent key %q, want the caller's %q", sdkKey, tt.callerKey)
				}
				for i, r := range rec.Requests() {
					if got := r.Header.Get("Idempotency-Key"); got != sdkKey || got == "" {
						t.Errorf("request %d: Idempotency-Key %q, want the SDK's %q", i+1, got, sdkKey)
					}
				}

				if tt.wantErr {
					if err == nil {
						t.Fatalf("got payment intent %s, want an error", pi.ID)
					}
					return
				}
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				if got, want := pi.ID, "pi_emulator1"; got != want {
					t.Errorf("payment intent %q, want %q", got, want)
				}
				if pi.Amount != 2000 || pi.Currency != stripesdk.CurrencyUSD {
					t.Errorf("payment intent %d %s, want 2000 usd", pi.Amount, pi.Currency)
				}
				if got := pi.LastResponse.Header.Get("Idempotent-Replayed"); got != "true" {
					t.Errorf("Idempotent-Replayed = %q, want %q (the answer is the stored one)", got, "true")
				}
			})
		})
	}
}
