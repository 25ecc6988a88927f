package fleet_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/sturdyhttp/sturdy/fleet/internal/redisproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newClient returns a client of srv, closed when the test ends. Client-side
// caching is off (the fleet does not use it) and so are rueidis's own
// retries, so that a test sees each call fail as it happens.
func newClient(t testing.TB, srv *redisproc.Server) rueidis.Client {
	t.Helper()
	opt, err := rueidis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("connect to redis-server: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// redisDo runs one command for a test and fails the test on an error.
func redisDo(t testing.TB, c rueidis.Client, args ...string) rueidis.RedisResult {
	t.Helper()
	r := c.Do(context.Background(), c.B().Arbitrary(args[0]).Args(args[1:]...).Build())
	if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("redis %v: %v", args, err)
	}
	return r
}

// get sends one GET to the test host through rt and returns its status,
// or the error.
func get(rt http.RoundTripper) (int, error) {
	req, _ := http.NewRequest("GET", host+"/v1/models", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
