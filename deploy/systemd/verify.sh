#!/usr/bin/env bash
# Checks deploy/systemd/fenced.service with `systemd-analyze verify` (and
# prints its exposure score): any warning fails. The unit's ExecStart names
# /usr/local/bin/fenced, which verify wants to exist: a copy of the unit
# points at a fenced built here instead.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v systemd-analyze >/dev/null; then
	echo "systemd-analyze is not installed (Debian package systemd)" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd ../.. && CGO_ENABLED=0 go build -o "$tmp/fenced" ./cmd/fenced)
sed "s#/usr/local/bin/fenced#$tmp/fenced#" fenced.service >"$tmp/fenced.service"
out=$(cd "$tmp" && systemd-analyze verify ./fenced.service 2>&1) || { echo "$out"; exit 1; }
if [ -n "$out" ]; then
	echo "systemd-analyze verify warns:"; echo "$out"; exit 1
fi
echo "systemd-analyze verify: fenced.service is clean"
# The check's positive control: a misspelt key must be reported.
sed 's/^NoNewPrivileges=/NoNewPrivilege=/' "$tmp/fenced.service" >"$tmp/broken.service"
if [ -z "$(cd "$tmp" && systemd-analyze verify ./broken.service 2>&1)" ]; then
	echo "systemd-analyze verify did not report a misspelt key: the check proves nothing" >&2
	exit 1
fi
systemd-analyze security --offline=yes "$tmp/fenced.service" 2>/dev/null | tail -1 || true
