#!/usr/bin/env bash
# Runs every test of every module of the repository with the race
# detector: the core module and each nested one (bench, examples/sdks,
# fleet, ...), found from their go.mod files, new untracked ones included.
#
# Every module runs even when an earlier one failed. Each prints go test's
# own lines (ok / FAIL per package) and how long it took; the script ends
# with a table and one summary line, and exits 1 if any module failed.
#
#   ./test.sh                  # what CI runs
#   ./test.sh -run TestRetry   # extra arguments go to every go test
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

mods=$(modules)
echo "test.sh: $(echo "$mods" | wc -w) modules: $(echo $mods); $(go version)"
start=$SECONDS
passed=0
failed=()
rows=()
for mod in $mods; do
  echo
  echo "== $mod: go test -race -count=1 ${*:+$* }./..."
  t0=$SECONDS
  if (cd "$mod" && go test -race -count=1 "$@" ./...); then
    status=ok
    passed=$((passed + 1))
  else
    status=FAIL
    failed+=("$mod")
  fi
  took=$(duration $((SECONDS - t0)))
  echo "-- $mod: $status in $took"
  rows+=("$(printf '%8s  %-4s  %s' "$took" "$status" "$mod")")
done

echo
echo "== summary"
printf '%s\n' "${rows[@]}"
[ ${#failed[@]} -eq 0 ] || echo "FAIL: ${failed[*]}"
echo "modules: $passed passed, ${#failed[@]} failed, in $(duration $((SECONDS - start)))"
[ ${#failed[@]} -eq 0 ]
