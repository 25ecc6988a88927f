package stripe

import (
	"context"
	"fmt"

	stripesdk "github.com/stripe/stripe-go/v85"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

// A payment intent whose first response is lost after Stripe acted:
// sturdy retries with the SDK's Idempotency-Key, Stripe replays the
// stored answer, and one payment intent exists.
func ExampleNewClient() {
	emu := &paymentIntents{}
	api := stripeAPI(emu)
	n := httptestutil.NewNetwork()
	srv := n.Serve("api.stripe.test", httptestutil.Script(httptestutil.CutAfter(api), httptestutil.Handler(api).Forever()))
	defer srv.Close()
	base := n.Transport()
	defer base.CloseIdleConnections()

	sc := NewClient("sk_test_emulator", transport.Options{Base: base}, stripesdk.BackendConfig{
		URL:           stripesdk.String(srv.URL),
		LeveledLogger: &stripesdk.LeveledLogger{Level: stripesdk.LevelNull},
	})
	pi, err := sc.V1PaymentIntents.Create(context.Background(), &stripesdk.PaymentIntentCreateParams{
		Amount:   stripesdk.Int64(2000),
		Currency: stripesdk.String("usd"),
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(pi.ID, pi.Amount, pi.Currency)
	fmt.Println("replayed:", pi.LastResponse.Header.Get("Idempotent-Replayed"))
	fmt.Println("payment intents created:", emu.created.Load())
	// Output:
	// pi_emulator1 2000 usd
	// replayed: true
	// payment intents created: 1
}
