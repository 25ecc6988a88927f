#!/usr/bin/env bash
# Prints the locked instructions (atomic operations: LOCK-prefixed
# instructions and XCHG with memory) per operation of one Go benchmark,
# counted by valgrind's callgrind and joined to the disassembly by
# cmd/locked. Like instructions.sh, the benchmark runs twice (2,000 and
# 12,000 operations, one thread, GOGC=off) and the difference is divided
# by 10,000; the functions that executed them follow.
#
#   bench/locked.sh ../transport 'BenchmarkConcurrencySuccess/stack=New$/concurrency=on$'
#
# PKGDIR is relative to bench/. Needs valgrind (apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")"
[ $# -eq 2 ] || { echo "usage: locked.sh PKGDIR BENCHREGEX" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$1" && go test -c -o "$tmp/bin" .)
go build -o "$tmp/locked" ./cmd/locked
for n in 2000 12000; do
  out=$(GOGC=off GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --dump-instr=yes \
    --callgrind-out-file="$tmp/$n.cg" "$tmp/bin" -test.run '^$' -test.bench "$2" -test.benchtime "${n}x" 2>&1)
  if [ "$(grep -c '^Benchmark.* ns/op' <<<"$out")" -ne 1 ]; then
    echo "$2 does not match exactly one benchmark" >&2
    exit 1
  fi
  "$tmp/locked" "$tmp/$n.cg" "$tmp/bin" >"$tmp/$n.txt"
done
awk '
  FNR == 1 { file++ }
  $1 == "total" { t[file] = $2; next }
  { f = $2; c[f, file] = $1; names[f] = 1 }
  END {
    printf "locked instructions/op %.2f\n", (t[2] - t[1]) / 10000
    for (f in names) { d = (c[f, 2] - c[f, 1]) / 10000; if (d >= 0.01 || d <= -0.01) printf "%8.2f %s\n", d, f | "sort -rn" }
  }' "$tmp/2000.txt" "$tmp/12000.txt"
