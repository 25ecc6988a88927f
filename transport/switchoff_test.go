package transport

import (
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// Disable is the one way to switch a part off, Hedge and Throttle
// included: with their bits set, a Hedge or Throttle whose settings are
// given is not built, and a slow first copy gets no hedge.
func TestDisableHedgeAndThrottle(t *testing.T) {
	tests := []struct {
		name       string
		disable    Layer
		wantCopies int32
		wantLayers int
	}{
		{"on", 0, 2, len(Layers(Options{})) + 2},
		{"LayerHedge", LayerHedge, 1, len(Layers(Options{})) + 1},
		{"LayerThrottle", LayerThrottle, 2, len(Layers(Options{})) + 1},
		{"both", LayerHedge | LayerThrottle, 1, len(Layers(Options{}))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var copies atomic.Int32
				base := Func(func(r *http.Request) (*http.Response, error) {
					if copies.Add(1) == 1 {
						time.Sleep(time.Second) // the first copy is slow
					}
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
				})
				o := Options{Base: base, Hedge: &policy.Hedge{Delay: 10 * time.Millisecond}, Throttle: &policy.Throttle{}, Disable: tt.disable}
				if got := len(Layers(o)); got != tt.wantLayers {
					t.Errorf("layers: %d, want %d", got, tt.wantLayers)
				}
				req, _ := http.NewRequest("GET", "http://api.test/", nil)
				resp, err := New(o).RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				time.Sleep(2 * time.Second) // every copy has returned
				if got := copies.Load(); got != tt.wantCopies {
					t.Errorf("copies sent: %d, want %d", got, tt.wantCopies)
				}
			})
		})
	}
}
