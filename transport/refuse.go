package transport

import (
	"net/http"
	"time"
)

// refuser is implemented by the RoundTrippers of this package that can
// tell, without sending anything, that a request would be refused if it
// were sent at the time at: an open [Breaker]. Layers with no opinion
// forward the question to the next one. [Retry] asks before each wait, so
// that it never waits only to be refused: it hands back the last outcome
// at once instead.
type refuser interface {
	refuses(req *http.Request, at time.Time) error
}

// refusal asks rt, when it can answer, whether req would be refused at
// the time at; nil means it would be sent, as far as rt knows.
func refusal(rt http.RoundTripper, req *http.Request, at time.Time) error {
	if r, ok := rt.(refuser); ok {
		return r.refuses(req, at)
	}
	return nil
}

func (t *deadline) refuses(req *http.Request, at time.Time) error { return refusal(t.next, req, at) }

func (l *rateLimiter) refuses(req *http.Request, at time.Time) error {
	return refusal(l.next, req, at)
}
