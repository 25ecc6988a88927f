#!/usr/bin/env bash
# Runs every test of every module of the repository with the race
# detector: the core module and each nested one (bench, examples/sdks,
# fleet, ...), found from their go.mod files, new untracked ones included.
#
# Every module runs even when an earlier one failed. Each prints go test's
# own lines (ok / FAIL / "? ... [no test files]" per package, and the
# output of every failed test), then how long it took, how many tests ran
# and how many were skipped, with their names. A module without a single
# test file says "no tests" at once, without compiling it: it is not
# counted as passed. The script ends
# with a table and one summary line, and exits 1 if any module failed.
#
#   ./test.sh                  # what CI runs
#   ./test.sh -run TestRetry   # extra arguments go to every go test
#
# go test runs with -json so that skips can be counted; a small filter,
# built from this file into a temporary directory, prints what go test
# prints without -json.
#
# A first run compiles every package with -race and downloads the nested
# modules' dependencies, which takes minutes; later runs reuse Go's build
# cache.
set -uo pipefail
cd "$(dirname "$0")"

# modules lists the directories that hold a go.mod: tracked ones and, in a
# working tree, new ones not ignored; without git, every go.mod found.
modules() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard -- 'go.mod' '*/go.mod'
  else
    find . -name go.mod -not -path '*/testdata/*' -not -path '*/vendor/*' | sed 's|^\./||'
  fi | xargs -n1 dirname | sort -u
}

# duration SECONDS prints 75 as 1m15s and 9 as 9s.
duration() {
  if [ "$1" -ge 60 ]; then printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); else printf '%ds' "$1"; fi
}

# The filter: reads go test -json on stdin, prints go test's plain lines,
# and writes "RUN SKIPPED PACKAGES" and the skipped tests' names to the
# file named by its argument.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/main.go" <<'GO'
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

type event struct {
	Action, Package, Test, Output string
}

func main() {
	var (
		run, skipped, packages int
		skips                  []string
		held                   = map[string][]string{} // output of running top-level tests, by package and name
	)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		line := in.Text()
		var e event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
			fmt.Fprintln(out, line) // not an event: go test's own line
			out.Flush()
			continue
		}
		top, _, _ := strings.Cut(e.Test, "/")
		key := e.Package + " " + top
		switch {
		case e.Action == "build-output":
			fmt.Fprint(out, e.Output)
		case e.Action == "output" && e.Test == "":
			if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "testing: warning: no tests to run") && !strings.HasPrefix(e.Output, "=== ") {
				fmt.Fprint(out, e.Output)
			}
		case e.Action == "output":
			if !strings.HasPrefix(e.Output, "=== ") {
				held[key] = append(held[key], e.Output)
			}
		case e.Test == "":
			if e.Action == "pass" || e.Action == "fail" {
				packages++
			}
		case e.Action == "pass" || e.Action == "fail" || e.Action == "skip":
			run++
			if e.Action == "skip" {
				skipped++
				pkg := e.Package[strings.LastIndex(e.Package, "/")+1:]
				skips = append(skips, e.Test+" ("+pkg+")")
			}
			if e.Test == top {
				if e.Action == "fail" {
					fmt.Fprint(out, strings.Join(held[key], ""))
				}
				delete(held, key)
			}
		}
		out.Flush()
	}
	for _, lines := range held { // a test that never ended: the package failed under it
		fmt.Fprint(out, strings.Join(lines, ""))
	}
	out.Flush()
	summary := fmt.Sprintf("%d %d %d\n%s\n", run, skipped, packages, strings.Join(skips, ", "))
	if err := os.WriteFile(os.Args[1], []byte(summary), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "test.sh:", err)
		os.Exit(1)
	}
}
GO
if ! (cd "$tmp" && go mod init testsum >/dev/null 2>&1 && go build -o testsum .); then
  echo "test.sh: cannot build the go test -json filter" >&2
  exit 1
fi

mods=$(modules)
echo "test.sh: $(echo "$mods" | wc -w) modules: $(echo $mods); $(go version)"
start=$SECONDS
passed=0
notests=0
failed=()
rows=()
allrun=0
allskipped=0
for mod in $mods; do
  echo
  t0=$SECONDS
  if tested=$(cd "$mod" && go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./... 2>/dev/null) && [ -z "$tested" ]; then
    # No package has a test file: say so at once, rather than compile
    # every package with -race (a minute for a program such as
    # fleet/clientcmp) to learn the same.
    echo "== $mod: no test files"
    echo "-- $mod: no tests"
    notests=$((notests + 1))
    rows+=("$(printf '%8s  %-8s  %6s run  %4s skipped  %s' "$(duration $((SECONDS - t0)))" "no tests" 0 0 "$mod")")
    continue
  fi
  echo "== $mod: go test -race -count=1 ${*:+$* }./..."
  rm -f "$tmp/counts"
  (cd "$mod" && go test -json -race -count=1 "$@" ./...) | "$tmp/testsum" "$tmp/counts"
  codes=("${PIPESTATUS[@]}")
  run=0 skipped=0 packages=0 skips=
  [ ! -f "$tmp/counts" ] || { read -r run skipped packages; read -r skips; } <"$tmp/counts"
  if [ "${codes[0]}" -ne 0 ] || [ "${codes[1]}" -ne 0 ]; then
    status=FAIL
    failed+=("$mod")
  elif [ "$packages" -eq 0 ]; then
    status="no tests"
    notests=$((notests + 1))
  else
    status=ok
    passed=$((passed + 1))
  fi
  allrun=$((allrun + run))
  allskipped=$((allskipped + skipped))
  took=$(duration $((SECONDS - t0)))
  echo "-- $mod: $status in $took: $run tests run (subtests included), $skipped skipped"
  [ -z "$skips" ] || echo "   skipped: $skips"
  rows+=("$(printf '%8s  %-8s  %6s run  %4s skipped  %s' "$took" "$status" "$run" "$skipped" "$mod")")
done

echo
echo "== summary"
printf '%s\n' "${rows[@]}"
[ ${#failed[@]} -eq 0 ] || echo "FAIL: ${failed[*]}"
echo "modules: $passed passed, ${#failed[@]} failed, $notests with no tests; tests: $allrun run, $allskipped skipped; in $(duration $((SECONDS - start)))"
[ ${#failed[@]} -eq 0 ]
