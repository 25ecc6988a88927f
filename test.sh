#!/usr/bin/env bash
# Runs every test of every module of the repository, with the race detector.
set -euo pipefail
cd "$(dirname "$0")"
for mod in $(git ls-files '*go.mod' | xargs -n1 dirname | sort); do
  echo "== go test -race ./... in $mod"
  (cd "$mod" && go test -race -count=1 ./...)
done
