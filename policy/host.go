package policy

import "net/http"

// HostVerdict is what one attempt's outcome says about the health of
// the host it was sent to, as [JudgeHost] decides.
type HostVerdict int8

// The verdicts of [JudgeHost].
const (
	// HostIgnored: the outcome says nothing about the host, and is not
	// counted either way.
	HostIgnored HostVerdict = iota
	// HostHealthy: the host answered.
	HostHealthy
	// HostFailing: the outcome counts against the host.
	HostFailing
)

// JudgeHost is [Judge]'s verdict on the host. It says what counts against a
// host, for circuit breakers and anything else that judges a host's health.
// resp is the attempt's response, nil when err is not.
func JudgeHost(req *http.Request, resp *http.Response, err error, callerEnded bool) HostVerdict {
	return Judge(Outcome{Request: req, Response: resp, Err: err, CallerEnded: callerEnded}).Host
}
