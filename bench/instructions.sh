#!/usr/bin/env bash
# Prints the instructions per operation of Go benchmarks, counted by
# valgrind's callgrind: unlike time, the count does not depend on what
# else the machine is doing, so two clients can be compared on a busy
# machine. Each benchmark runs twice (5,000 and 35,000 operations, one
# thread, no asynchronous preemption, which callgrind cannot follow) and
# the difference is divided by 30,000, so that setup cancels out. The
# garbage collector is off (GOGC=off): its work depends on timing and
# would add a run-to-run spread of a thousand instructions or more; what
# a client allocates, which that work follows, is in -benchmem's B/op
# and allocs/op.
#
#   bench/instructions.sh                      # the success-path table
#   bench/instructions.sh 'BenchmarkSuccess/base=mem/op=GET/client=sturdy$'
#
# Needs valgrind (apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")"
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
go test -c -o "$bin" .

count() { # count REGEX N: instructions of N operations (plus setup)
  local out
  out=$(GOGC=off GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    "$bin" -test.run '^$' -test.bench "$1" -test.benchtime "${2}x" 2>&1)
  if [ "$(grep -c '^Benchmark.* ns/op' <<<"$out")" -ne 1 ]; then
    echo "$1 does not match exactly one benchmark" >&2
    exit 1
  fi
  awk '/Collected/{print $4}' <<<"$out"
}

if [ $# -gt 0 ]; then
  regexes=("$@")
else
  regexes=()
  for op in GET POST-GetBody; do
    for c in bare retryablehttp retryablehttp-rt failsafe resty sturdy-retry sturdy; do
      regexes+=("BenchmarkSuccess/base=mem/op=$op/client=$c\$")
    done
  done
fi
printf '%-60s %s\n' benchmark instructions/op
for re in "${regexes[@]}"; do
  a=$(count "$re" 5000)
  b=$(count "$re" 35000)
  printf '%-60s %d\n' "$re" $(((b - a) / 30000))
done
