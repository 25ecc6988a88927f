package transport

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
)

// An operation that ends because GetBody failed before a retry reports
// it: OperationOf gives the attempt made and the reason, as OnGiveUp
// does, never the empty reason of a success.
func TestOperationOfGetBodyFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Status(503, "busy"))
		env := newFakeEnv(t, rec)
		var gaveUp []policy.Reason
		rt := New(Options{Base: env.base, Retry: policy.Retry{Backoff: constant(time.Second)},
			Hooks: Hooks{OnGiveUp: func(e policy.GiveUpEvent) { gaveUp = append(gaveUp, e.Reason) }}})
		req, _ := http.NewRequest("PUT", env.url+"/doc", strings.NewReader("v1"))
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("body gone") }
		resp, err := (&http.Client{Transport: rt}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); resp.StatusCode != 503 || got != "busy" {
			t.Errorf("got %d %q, want the 503 as it came", resp.StatusCode, got)
		}
		rec.WantCount(t, 1)
		op, ok := OperationOf(resp)
		want := Operation{Attempts: 1, Reason: policy.ReasonBodyNotReplayable}
		if !ok || op != want {
			t.Errorf("OperationOf = %+v, %v; want %+v, true", op, ok, want)
		}
		if len(gaveUp) != 1 || gaveUp[0] != policy.ReasonBodyNotReplayable {
			t.Errorf("OnGiveUp reasons = %v, want [%s]", gaveUp, policy.ReasonBodyNotReplayable)
		}
	})
}
