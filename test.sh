#!/usr/bin/env bash
# Runs every test of the project: vet, the race-enabled test suite with the
# fuzz corpora, and a compile-and-run-once of every benchmark.
set -euo pipefail
cd "$(dirname "$0")"
gofmt_out=$(gofmt -l . || true)
if [ -n "$gofmt_out" ]; then echo "gofmt needed on: $gofmt_out"; exit 1; fi
go vet ./...
go test -race -count=1 -timeout 10m ./...
go test -run '^$' -bench . -benchtime 1x -count=1 ./... >/dev/null
for m in benchmarks examples otelpipelined; do
	if [ -f "$m/go.mod" ]; then
		go -C "$m" vet ./...
		go -C "$m" test -race -count=1 -timeout 10m ./...
	fi
done
