package aws

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

// An AWS error response whose body stalls half way (headers and the start
// of the JSON, then nothing) is cut after IdleTimeout, as any response
// body is: ErrorCodes, which reads the body for its code before the stack
// hands the response on, must not hold the call until Timeout.
func TestStalledErrorBodyIsCutAfterIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 5 * time.Second
		gone := make(chan struct{})
		n := httptestutil.NewNetwork()
		srv := n.Serve("dynamodb.us-east-1.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#Throttl`)
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
			close(gone)
		}))
		defer srv.Close()
		base := n.Transport()
		defer base.CloseIdleConnections()

		c := &http.Client{Transport: Transport(transport.Options{Base: base, IdleTimeout: idle})}
		req, _ := http.NewRequestWithContext(context.Background(), "POST", srv.URL+"/", strings.NewReader(`{"TableName":"orders"}`))
		req.Header.Set("X-Amz-Target", "DynamoDB_20120810.PutItem")
		start := time.Now()
		resp, err := c.Do(req)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		took := time.Since(start)
		if got, max := took, idle*9/8; got > max {
			t.Errorf("the stalled error body ended the call after %v, want at most %v (IdleTimeout %v)", got, max, idle)
		}
		var de *transport.DeadlineError
		if !errors.As(err, &de) || de.Bound != "IdleTimeout" {
			t.Errorf("got error %v, want the IdleTimeout's *transport.DeadlineError", err)
		}
		synctest.Wait()
		select {
		case <-gone:
		default:
			t.Error("the server did not see the client go away")
		}
	})
}
