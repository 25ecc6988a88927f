package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
)

// putPipe sends a PUT whose body declares 5 bytes and is a pipe that
// delivers them at once but reports its end only once the response is in
// (or the call failed), through rt, and returns what came back.
func putPipe(t *testing.T, rt http.RoundTripper, url, body string, declared int64) (int, string, error) {
	t.Helper()
	pr, pw := io.Pipe()
	answered := make(chan struct{})
	go func() {
		io.WriteString(pw, body)
		<-answered
		pw.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "PUT", url, pr)
	req.ContentLength = declared
	resp, err := rt.RoundTrip(req)
	close(answered)
	if err != nil {
		return 0, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b), err
}

// A body that delivers every declared byte but reports its end only
// after the response: the bare client sends the bytes and gets the
// answer; so must the stack, whose replay of the body never holds back a
// declared byte to look for one more. A body longer than it declares
// is sent once: the server may answer its declared bytes before the
// surplus is found, as it does to the bare client; else the caller gets
// an error that matches policy.ErrInvalidRequest.
func TestReplayDoesNotHoldBackTheLastByte(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		io.WriteString(w, "got "+string(b))
	})
	tests := []struct {
		name     string
		body     string
		declared int64
		want     string // "": an error
	}{
		{"all declared bytes, the end after the response", "hello", 5, "got hello"},
		{"one byte declared", "h", 1, "got h"},
		{"a byte more than declared", "hello!", 5, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bare := newFakeEnv(t, echo)
				bstatus, bbody, berr := putPipe(t, bare.base, bare.url, tt.body, tt.declared)
				rec := httptestutil.NewRecorder(echo)
				env := newFakeEnv(t, rec)
				status, body, err := putPipe(t, New(Options{Base: env.base}), env.url, tt.body, tt.declared)
				synctest.Wait()
				rec.WantCount(t, 1)
				if tt.want == "" {
					if err != nil && !errors.Is(err, policy.ErrInvalidRequest) {
						t.Errorf("stack: %v, want an error that matches policy.ErrInvalidRequest", err)
					}
					if err == nil && (status != bstatus || body != bbody) {
						t.Errorf("stack: %d %q; bare client: %d %q, %v", status, body, bstatus, bbody, berr)
					}
					return
				}
				if berr != nil || bbody != tt.want {
					t.Fatalf("bare client: %d %q, %v", bstatus, bbody, berr)
				}
				if err != nil || status != 200 || body != tt.want {
					t.Errorf("stack: %d %q, %v; bare client: %d %q", status, body, err, bstatus, bbody)
				}
			})
		})
	}
}
