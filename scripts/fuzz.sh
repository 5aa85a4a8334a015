#!/usr/bin/env bash
# Runs every fuzz target of fenced for a bounded time each: FUZZTIME (15s by
# default, a Go duration or "Nx" for N inputs). Name targets to run only
# those:   scripts/fuzz.sh FuzzApply FuzzHandlers
# A failing input is written to the package's testdata/fuzz/<target>/ and
# from then on runs with every `go test` as a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
FUZZTIME=${FUZZTIME:-15s}

# package target: each bounds what untrusted bytes can do.
targets=(
	"./fence FuzzParse"              # a token in decimal text
	"./api FuzzDecodeRequest"        # every request body, strictly decoded
	"./api FuzzHandlers"             # every POST endpoint, through authentication
	"./fsm FuzzDecode"               # a log entry's command
	"./fsm FuzzApply"                # a log entry applied: only the corrupt-log panic
	"./fsm FuzzRestore"              # a Raft snapshot
	"./cluster FuzzDecodeBackup"     # a backup given to restore
)

# fuzz_one runs one target. Go before 1.27 can fail a target with a bare
# "context deadline exceeded" when -fuzztime runs out while a worker is busy
# (golang/go#75804): no input failed, none is written. That alone, and only
# once, is run again; any other failure, or the same one twice, fails.
fuzz_one() {
	local out rc
	out=$(mktemp)
	for attempt in 1 2; do
		rc=0
		go test -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" "$1" 2>&1 | tee "$out" || rc=$?
		if [ "$rc" -eq 0 ]; then
			rm -f "$out"
			return 0
		fi
		if [ "$attempt" -eq 1 ] && deadline_flake "$out"; then
			echo "fuzz.sh: $2 stopped on the fuzz engine's own deadline (golang/go#75804), no failing input; running it again"
			continue
		fi
		rm -f "$out"
		return "$rc"
	done
}

# deadline_flake: the run's only failure is the engine's deadline message.
deadline_flake() {
	grep -q '^    context deadline exceeded$' "$1" &&
		! grep -qE 'Failing input written|^panic:|_test\.go:[0-9]+:' "$1"
}

want=" $* "
ran=0
for t in "${targets[@]}"; do
	read -r pkg name _ <<<"$t"
	if [ $# -gt 0 ] && [[ $want != *" $name "* ]]; then
		continue
	fi
	echo "== $pkg $name ($FUZZTIME)"
	fuzz_one "$pkg" "$name"
	ran=$((ran + 1))
done
if [ "$ran" -eq 0 ]; then
	echo "no fuzz target named: $*" >&2
	exit 2
fi
