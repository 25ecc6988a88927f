// Command vulndb builds a Go vulnerability database that govulncheck
// reads with -db file:///DIR, from golang.org/x/vulndb at a pinned
// version fetched through the Go module proxy:
//
//	go run . -o DIR
//
// The module's data/osv directory holds every entry as an OSV file; the
// command writes them under DIR/ID/ with the indexes govulncheck reads
// first (DIR/index/db.json, modules.json and vulns.json), and prints one
// line that names the version, its date and what it holds.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

// pinnedVersion is the version of golang.org/x/vulndb that CI checks
// against: to bump it, take the version `go list -m golang.org/x/vulndb@latest` prints.
const pinnedVersion = "v0.0.0-20261105234957-e22db6528018"

func main() {
	out := flag.String("o", "", "directory to write the database to (required; created)")
	version := flag.String("version", pinnedVersion, "version of "+vulndbModule+" to build from")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	line, err := run(*version, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(line)
}

// run downloads version, builds the database into out, and returns a
// line that says what the database holds.
func run(version, out string) (string, error) {
	s, err := download(version)
	if err != nil {
		return "", err
	}
	sum, err := build(s.osvDir(), out, s.Time)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s@%s (modified %s, %d entries, %d modules)",
		vulndbModule, s.Version, sum.Modified.UTC().Format(time.RFC3339), sum.Entries, sum.Modules), nil
}
