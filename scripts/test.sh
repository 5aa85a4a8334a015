#!/usr/bin/env bash
# Runs every test of the repository with the race detector: the root module
# (the server, the CLI, the chaos suite), then the modules beside it (the Go
# client, the token, the resource guards, the examples). Arguments go to each
# `go test` (for example -run, -count=1, -v). FENCED_TEST_TIMEOUT bounds each
# test binary (default 20m): a hung binary panics with the names of the tests
# it was running, and each test's cleanup stops what it started.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

timeout=${FENCED_TEST_TIMEOUT:-20m}
failed=()
for mod in . client fence fence/guard examples; do
	echo "== go test -race ./... ($mod)"
	if ! (cd "$mod" && go test -race -timeout "$timeout" "$@" ./...); then
		failed+=("$mod")
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "FAIL: the tests of ${failed[*]}" >&2
	exit 1
fi
