#!/usr/bin/env bash
# Runs every fuzz target of fenced for a bounded budget each: FUZZTIME if set
# (a Go duration, or "Nx" for N inputs), else each target's own below (about
# 15 s here). Name targets to run only those:
#   scripts/fuzz.sh FuzzApply FuzzHandlers
# A failing input is written to the package's testdata/fuzz/<target>/ and
# from then on runs with every `go test` as a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

# package target budget: each bounds what untrusted bytes can do. FuzzParse
# runs ~45k inputs/s and, on a time budget, often hits the fuzz engine's own
# deadline race (below); a count budget has no deadline to race.
targets=(
	"./fence FuzzParse 500000x"          # a token in decimal text (the fence module)
	"./client FuzzEventDecoder 10s"      # a watch event as the Go client decodes it (the client module)
	"./client FuzzSSEReader 10s"         # a watch stream as the Go client reads it
	"./client FuzzAnswerDecoder 10s"     # verify and keepalive answers: the Go client's fast path agrees with encoding/json
	"./api FuzzDecodeRequest 15s"        # every request body, strictly decoded
	"./api FuzzHandlers 15s"             # every POST endpoint, through authentication
	"./api FuzzDecodeFlatStrings 10s"    # verify and keepalive bodies: the fast path agrees with the strict decoder
	"./fsm FuzzDecode 15s"               # a log entry's command
	"./fsm FuzzApply 15s"                # a log entry applied: only the corrupt-log panic
	"./fsm FuzzRestore 15s"              # a Raft snapshot
	"./cluster FuzzDecodeBackup 15s"     # a backup given to restore
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
		# A directory with a go.mod of its own is a module beside the root one.
		if [ -f "$1/go.mod" ]; then
			(cd "$1" && go test -run '^$' -fuzz "^${2}\$" -fuzztime "$3" .) 2>&1 | tee "$out" || rc=$?
		else
			go test -run '^$' -fuzz "^${2}\$" -fuzztime "$3" "$1" 2>&1 | tee "$out" || rc=$?
		fi
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
	read -r pkg name budget _ <<<"$t"
	budget=${FUZZTIME:-$budget}
	if [ $# -gt 0 ] && [[ $want != *" $name "* ]]; then
		continue
	fi
	echo "== $pkg $name ($budget)"
	fuzz_one "$pkg" "$name" "$budget"
	ran=$((ran + 1))
done
if [ "$ran" -eq 0 ]; then
	echo "no fuzz target named: $*" >&2
	exit 2
fi
