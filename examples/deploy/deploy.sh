#!/bin/sh
# deploy.sh — gate a deploy command behind a fenced lock.
#
#   FENCE_ENDPOINTS=127.0.0.1:7700 ./deploy.sh production ./do-deploy.sh v1.2.3
#
# fencectl lock holds the key "deploy/<target>" while the command runs, and
# kills the command (SIGTERM, then SIGKILL) if the lease is lost. Inside, the
# script checks its token with fencectl verify right before the step that
# changes the world, so a deploy that froze and woke up after someone else
# took over stops instead of overwriting the newer deploy.
set -eu

if [ "$#" -lt 2 ]; then
	echo "usage: $0 TARGET COMMAND [ARGS...]" >&2
	exit 2
fi
target=$1
shift
FENCECTL=${FENCECTL:-fencectl}
export FENCECTL

exec "$FENCECTL" lock "deploy/$target" --ttl "${DEPLOY_TTL:-15s}" --wait "${DEPLOY_WAIT:-1m}" -- \
	sh -c '
		echo "deploying with token $FENCE_TOKEN (lease until $FENCE_LEASE_DEADLINE)"
		# ... slow preparation: build, upload, wait for approvals ...
		if ! "$FENCECTL" verify "$FENCE_KEY" "$FENCE_TOKEN" --holder "$FENCE_HOLDER"; then
			echo "our grant is no longer current: not deploying" >&2
			exit 75
		fi
		exec "$@"
	' deploy "$@"
