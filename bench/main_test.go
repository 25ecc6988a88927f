package bench

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the tests leave no goroutine behind. A benchmark
// run is not checked: some peers leak connections on purpose of their
// design (failsafehttp v0.9.8 never closes the body of a response it
// retries), and BenchmarkFailure reports that as a number rather than
// failing the whole run.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
