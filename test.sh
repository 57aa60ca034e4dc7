#!/usr/bin/env bash
# Runs every test of the project: the references check, gofmt, vet,
# staticcheck, the race-enabled test suite with the fuzz corpora (the root
# package under GOMAXPROCS 1, 2 and 4, and under Go 1.27 too), and a
# compile-and-run-once of every benchmark.
set -euo pipefail
cd "$(dirname "$0")"
# Each sub-module (benchmarks, examples, otelpipelined) builds against this
# directory's module through the replace directive in its go.mod; a
# developer's go.work would build every module with the union of their
# requirements, which no user of one module gets.
export GOWORK=off
# Each step's wall time, printed at the end: the whole run is kept under
# 12 minutes on a 2-core machine from a fresh clone.
steps=()
step() { steps+=("$(printf '%4ds  %s' "$SECONDS" "$1")"); }
trap 'printf "%s\n" "${steps[@]}" "$(printf "%4ds  end" "$SECONDS")"' EXIT
# The repository speaks of the library alone: no work sittings or internal
# issue numbers in any tracked file (.ci/check-refs lists each hit).
.ci/check-refs
gofmt_out=$(gofmt -l . || true)
if [ -n "$gofmt_out" ]; then echo "gofmt needed on: $gofmt_out"; exit 1; fi

# staticcheck, pinned: 2026.2.2 (module v0.8.2) supports Go 1.26; it comes
# from the Go module proxy. A finding fails the run (STATICCHECK_STRICT=0
# reports them as warnings only). If it cannot be fetched, warn and go on.
staticcheck() {
	local out
	if out=$(go -C "$1" run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./... 2>&1); then
		return 0
	fi
	echo "$out"
	if ! grep -qE '^[^ ]+\.go:[0-9]+:[0-9]+: ' <<<"$out"; then
		echo "warning: staticcheck did not run in $1"
	elif [ "${STATICCHECK_STRICT:-1}" = 1 ]; then
		echo "staticcheck: findings in $1"
		return 1
	else
		echo "warning: staticcheck findings in $1 (not yet fatal)"
	fi
}

# Go 1.27 comes from the module proxy: fetch it while the checks below run.
# So are the examples' SDKs (go-elasticsearch, the AWS SDK, ...), whose
# download and race-enabled build took four minutes of a fresh run on
# their own: both go on beside the root's tests, on the build cache the
# later steps find.
go127=go1.27.3
(GOTOOLCHAIN=$go127 go version >/dev/null 2>&1 &)
(go -C examples vet ./... && go -C examples test -race -count=1 -run '^$' ./...) >/dev/null 2>&1 &
prebuild=$!
trap 'kill "$prebuild" 2>/dev/null || true; printf "%s\n" "${steps[@]}" "$(printf "%4ds  end" "$SECONDS")"' EXIT
go vet ./...
step "vet"
staticcheck .
step "staticcheck"
go test -race -count=1 -cpu 1,2,4 -timeout 15m ./...

# The core's tests (root and internal/) under Go 1.27 as well: users are on 1.26 and
# 1.27 (go.mod's go line stays 1.26). The toolchain comes from the Go
# module proxy; a run that cannot fetch it fails. Race-enabled at one
# -cpu (the GOMAXPROCS variants ran above): about 2 minutes.
step "core tests (root and internal/), -race -cpu 1,2,4"
if ! GOTOOLCHAIN=$go127 go version >/dev/null; then
	echo "cannot fetch $go127 (GOTOOLCHAIN=$go127): the tests under Go 1.27 did not run"
	exit 1
fi
GOTOOLCHAIN=$go127 go vet ./...
GOTOOLCHAIN=$go127 go test -race -count=1 -cpu 4 -timeout 15m ./...
step "core tests under $go127"
go test -run '^$' -bench . -benchtime 1x -count=1 ./... >/dev/null
step "benchmarks once"
# The sub-modules race-enabled, but for the benchmarks program's
# TestSuites (every suite once, skipped under -short): it runs the
# transport as the root's tests do, and waits on its servers three times
# longer under the race detector, so it runs without it.
for m in benchmarks examples otelpipelined; do
	if [ -f "$m/go.mod" ]; then
		go -C "$m" vet ./...
		staticcheck "$m"
		go -C "$m" test -race -short -count=1 -timeout 10m ./...
		step "$m"
	fi
done
go -C benchmarks test -count=1 -run '^TestSuites$' -timeout 10m .
step "benchmarks' TestSuites"
