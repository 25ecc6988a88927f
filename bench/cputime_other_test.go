//go:build !unix

package bench

import "time"

// cpuTime is not measured here: reportCPU then reports nothing.
func cpuTime() time.Duration { return 0 }
