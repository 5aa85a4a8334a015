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

want=" $* "
ran=0
for t in "${targets[@]}"; do
	read -r pkg name _ <<<"$t"
	if [ $# -gt 0 ] && [[ $want != *" $name "* ]]; then
		continue
	fi
	echo "== $pkg $name ($FUZZTIME)"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg"
	ran=$((ran + 1))
done
if [ "$ran" -eq 0 ]; then
	echo "no fuzz target named: $*" >&2
	exit 2
fi
