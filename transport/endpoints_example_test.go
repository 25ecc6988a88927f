package transport_test

import (
	"fmt"
	"io"
	"net/http"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

// An origin that refuses connections, and an alternate that serves the
// same API with its own key: the request is served by the alternate,
// path and query kept.
func ExampleEndpoints() {
	n := httptestutil.NewNetwork() // an in-memory network; api.example.test listens nowhere
	eu := n.Serve("eu.example.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s%s with %s", r.Host, r.URL.RequestURI(), r.Header.Get("Authorization"))
	}))
	defer eu.Close()
	base := n.Transport()
	defer base.CloseIdleConnections()

	client := &http.Client{Transport: transport.New(transport.Options{
		Base: base,
		Endpoints: transport.Endpoints{
			Alternates: map[string][]string{"http://api.example.test": {"http://eu.example.test"}},
			Adjust: func(r *http.Request, origin string) {
				r.Header.Set("Authorization", "Bearer eu-key")
			},
		},
	})}
	resp, err := client.Post("http://api.example.test/v1/charges?dry=1", "text/plain", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	op, _ := transport.OperationOf(resp)
	fmt.Println(string(body))
	fmt.Println("served by", op.Origin, "after", op.Attempts, "attempts")
	// Output:
	// eu.example.test/v1/charges?dry=1 with Bearer eu-key
	// served by http://eu.example.test after 2 attempts
}
