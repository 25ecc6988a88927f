package github

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

// A repository read through sturdy: the first answer is a 403 secondary
// rate limit with Retry-After: 1, sturdy waits a second and tries again.
func ExampleNewClient() {
	emu := &repos{quota: httptestutil.Quota{Limit: 5000, Remaining: 4998, Reset: 30 * time.Minute}}
	n := httptestutil.NewNetwork()
	srv := n.Serve("api.github.test", httptestutil.Script(secondaryLimit(time.Second), httptestutil.Handler(emu).Forever()))
	defer srv.Close()
	base := n.Transport()
	defer base.CloseIdleConnections()

	client := NewClient(transport.Options{Base: base}).WithAuthToken("ghp_example")
	client.BaseURL, _ = url.Parse(srv.URL + "/")
	repo, resp, err := client.Repositories.Get(context.Background(), "octo", "hello")
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(repo.GetFullName(), resp.Rate.Remaining)
	// Output: octo/hello 4998
}
