package transport

import (
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

// Deadline covers the response body "whatever it is ... and no longer":
// an upgraded connection is closed when the deadline runs out.
func TestDeadlineBoundsUpgradedConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			brw.Flush()
			io.Copy(conn, brw)
		}))
		c := &http.Client{Transport: Chain(env.base, Deadline(time.Second))}
		req, _ := http.NewRequest("GET", env.url, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "echo")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rw := resp.Body.(io.ReadWriteCloser)
		defer rw.Close()
		time.Sleep(time.Minute)
		if _, err := io.WriteString(rw, "ping"); err != nil {
			return // closed: as wanted
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(rw, buf); err == nil {
			t.Errorf("read %q a minute after Deadline(1s) ran out: the upgraded connection is not bounded", buf)
		}
	})
}
