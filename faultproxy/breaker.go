package faultproxy

import (
	"fmt"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
)

// BreakerShort and BreakerLong are the settings of the breaker
// comparison (TestFaultProxyBreaker...): a busy client (Workers
// goroutines, each starting at most one operation per Pace) whose every
// attempt opens a connection of its own (RequestsPerConn 1), so that a
// toxic dealt to a share of connections hits that share of attempts. Each
// client first sends 50 requests through the proxy before its toxics are
// added (Warmup): the comparison is of a busy client whose host begins to
// fail a share of its requests. (A breaker with fewer than MinRequests
// outcomes in its window judges its host as a quiet one, by 5 failures in
// a row: a client that starts against a host already failing half its
// requests opens in some starts, see TestBreakerFlakyHostFromAFreshStart
// in transport.)
//
// AttemptTimeout is long enough that a stall of the loaded machine (or
// of the toxiproxy process starved of CPU, which the client cannot tell
// from a host that stopped answering) must last two of them before the
// breaker sees fresh requests fail: under -race on a busy 2-core
// machine, stalls of 800 ms were seen, and with 300 ms per attempt the
// breaker opened on them.
var (
	BreakerShort = Settings{
		Workers:         16,
		Pace:            40 * time.Millisecond,
		RequestsPerConn: 1,
		Ops:             200,
		Deadline:        2 * time.Second,
		Attempt:         500 * time.Millisecond,
		MinBody:         1 << 10,
		MaxBody:         4 << 10,
		Margin:          250 * time.Millisecond,
		QuietWait:       300 * time.Millisecond,
		Warmup:          50,
	}
	BreakerLong = Settings{
		Workers:         32,
		Pace:            40 * time.Millisecond,
		RequestsPerConn: 1,
		Ops:             2000,
		Deadline:        3 * time.Second,
		Attempt:         time.Second,
		MinBody:         1 << 10,
		MaxBody:         16 << 10,
		Margin:          250 * time.Millisecond,
		QuietWait:       500 * time.Millisecond,
		Warmup:          50,
	}
)

// BreakerFaults are the phases of the breaker comparison: toxiproxy
// hanging or resetting 1%, 10% and 50% of connections.
//
// The hang is the timeout toxic on the request: its bytes are dropped,
// the upstream never sees it, and the attempt runs into its
// AttemptTimeout. (On the response, with one request per connection, it
// would not hang: the upstream closes the connection after answering,
// and toxiproxy passes the close on.) The reset is reset_peer on the
// response, as it starts: the upstream has performed the request, so a
// resend the stack should not have made shows as a second side effect.
func BreakerFaults() []Phase {
	var phases []Phase
	for _, f := range []struct{ verb, typ, stream string }{
		{"hang", "timeout", "upstream"},
		{"reset", "reset_peer", "downstream"},
	} {
		for _, share := range []float32{0.01, 0.10, 0.50} {
			phases = append(phases, Phase{
				Name: fmt.Sprintf("%s %.0f%%", f.verb, share*100),
				Toxics: []Toxic{{Type: f.typ, Stream: f.stream, Toxicity: share,
					Attributes: toxiproxy.Attributes{"timeout": 0}}},
			})
		}
	}
	return phases
}
