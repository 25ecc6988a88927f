package faultproxy

import (
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
)

// LongEnv names the environment variable that selects the long run:
// FAULTPROXY=long. Otherwise the short run goes, as part of ./test.sh.
const LongEnv = "FAULTPROXY"

// Short are the short run's settings: a few seconds per phase.
var Short = Settings{
	Workers:         8,
	Pace:            100 * time.Millisecond,
	RequestsPerConn: 4,
	Ops:             24,
	Deadline:        2 * time.Second,
	Attempt:         500 * time.Millisecond,
	MinBody:         1 << 10,
	MaxBody:         16 << 10,
	Margin:          250 * time.Millisecond,
	QuietWait:       300 * time.Millisecond,
}

// Long are the long run's settings, those of the run BENCHMARKS.md quotes but for
// the count: 5 s per operation, 1 s per attempt, bodies of 1-64 KiB.
var Long = Settings{
	Workers:         25,
	Pace:            200 * time.Millisecond,
	RequestsPerConn: 4,
	Ops:             200,
	Deadline:        5 * time.Second,
	Attempt:         time.Second,
	MinBody:         1 << 10,
	MaxBody:         64 << 10,
	Margin:          250 * time.Millisecond,
	QuietWait:       500 * time.Millisecond,
}

// Phases returns the suite's faults, each for a run of its own. Reuse
// marks the phases where nothing breaks a connection, so that a client
// that pools connections opens about one per worker for each
// RequestsPerConn requests.
//
// Rates scale with the bodies: the slow uplink takes about twice an
// attempt's limit for the largest body, so that attempts are cut while
// the proxy still holds their bytes.
func Phases(s Settings) []PhaseSpec {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	uplink := int64(s.MaxBody) / ms(2*s.Attempt) // bytes per ms: KB/s to toxiproxy
	return []PhaseSpec{
		{Phase: Phase{Name: "latency+jitter", Toxics: []Toxic{
			{Type: "latency", Stream: "downstream", Toxicity: 1, Attributes: toxiproxy.Attributes{"latency": 40, "jitter": 40}},
			{Type: "latency", Stream: "upstream", Toxicity: 1, Attributes: toxiproxy.Attributes{"latency": 10, "jitter": 10}},
		}}, Reuse: true},
		{Phase: Phase{Name: "reset_peer request", Toxics: []Toxic{
			{Type: "reset_peer", Stream: "upstream", Toxicity: 0.3, Attributes: toxiproxy.Attributes{"timeout": 0}},
		}}},
		{Phase: Phase{Name: "reset_peer response", Toxics: []Toxic{
			{Type: "reset_peer", Stream: "downstream", Toxicity: 0.3, Attributes: toxiproxy.Attributes{"timeout": 0}},
		}}},
		{Phase: Phase{Name: "reset_peer request 100ms", Toxics: []Toxic{
			{Type: "reset_peer", Stream: "upstream", Toxicity: 0.3, Attributes: toxiproxy.Attributes{"timeout": 100}},
		}}},
		{Phase: Phase{Name: "reset_peer response 100ms", Toxics: []Toxic{
			{Type: "reset_peer", Stream: "downstream", Toxicity: 0.3, Attributes: toxiproxy.Attributes{"timeout": 100}},
		}}},
		{Phase: Phase{Name: "timeout (hang)", Toxics: []Toxic{
			{Type: "timeout", Stream: "downstream", Toxicity: 0.2, Attributes: toxiproxy.Attributes{"timeout": 0}},
		}}},
		{Phase: Phase{Name: "slicer", Toxics: []Toxic{
			{Type: "slicer", Stream: "downstream", Toxicity: 1, Attributes: toxiproxy.Attributes{"average_size": 64, "size_variation": 48, "delay": 100}},
			{Type: "slicer", Stream: "upstream", Toxicity: 1, Attributes: toxiproxy.Attributes{"average_size": 512, "size_variation": 256, "delay": 50}},
		}}, Reuse: true},
		{Phase: Phase{Name: "limit_data (response cut)", Toxics: []Toxic{
			{Type: "limit_data", Stream: "downstream", Toxicity: 0.5, Attributes: toxiproxy.Attributes{"bytes": 6000}},
		}}},
		{Phase: Phase{Name: "bandwidth (slow uplink)", Toxics: []Toxic{
			{Type: "bandwidth", Stream: "upstream", Toxicity: 1, Attributes: toxiproxy.Attributes{"rate": uplink}},
		}}, SlowUplink: true},
	}
}

// PhaseSpec is a phase and what the suite expects of it.
type PhaseSpec struct {
	Phase
	// Reuse: nothing breaks a connection, so sturdy opens at most one per
	// worker.
	Reuse bool
	// SlowUplink: requests keep arriving after their callers gave up;
	// the phase where deadline propagation matters.
	SlowUplink bool
}
