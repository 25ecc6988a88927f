// Command fleet runs the fleet demo from the repository root:
//
//	go run ./examples/fleet
//
// The demo itself lives in the fleet module (fleet/examples/fleet), which
// depends on a Redis client that the core module must not; this launcher
// runs it there with `go run`, passing its flags through, so that the
// command works from the root as the README shows. It needs redis-server
// on the PATH (apt-get install redis-server); the demo says so and exits
// non-zero when there is none.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

func main() {
	dir, err := fleetModule()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(2)
	}
	cmd := exec.Command("go", append([]string{"run", "./examples/fleet"}, os.Args[1:]...)...)
	cmd.Dir = dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(2)
	}
}

// fleetModule finds the fleet module's directory from the working
// directory or one of its parents (go run builds elsewhere, so the
// source's own path is no guide).
func fleetModule() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "fleet", "go.mod")); err == nil {
			return filepath.Join(d, "fleet"), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no fleet/go.mod in %s or its parents: run it from the sturdy repository", wd)
		}
	}
}
