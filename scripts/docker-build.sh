#!/usr/bin/env bash
# Builds the static fenced and fencectl binaries and the fenced image from them.
#
#   scripts/docker-build.sh            # tags fenced:dev
#   scripts/docker-build.sh fenced:v1  # another tag (or FENCED_IMAGE=...)
#
# The binaries and the rest of the image's files are staged in a build context
# directory (bin/docker, or FENCED_DOCKER_CONTEXT), so the build sends a few
# megabytes to the engine and needs no base image: the image is FROM scratch.
set -euo pipefail
cd "$(dirname "$0")/.."

tag=${1:-${FENCED_IMAGE:-fenced:dev}}
ctx=${FENCED_DOCKER_CONTEXT:-bin/docker}
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
	PATH=/usr/local/go/bin:$PATH
fi

rm -rf "$ctx"
mkdir -p "$ctx/etc"
mkdir -m 0700 "$ctx/data"
cp docker/rootfs/etc/passwd docker/rootfs/etc/group "$ctx/etc/"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$ctx/" ./cmd/fenced ./cmd/fencectl

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
old=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
# The classic builder works everywhere, with or without BuildKit installed;
# its deprecation notice is shown only when the build fails.
if ! out=$(DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0} docker build --quiet \
	--label org.opencontainers.image.title=fenced \
	--label org.opencontainers.image.revision="$rev" \
	-f Dockerfile -t "$tag" "$ctx" 2>&1); then
	echo "$out" >&2
	exit 1
fi
# The image the tag named before, unless a container still uses it or it has
# other tags, would be left behind untagged: remove it.
new=$(docker image inspect -f '{{.Id}}' "$tag")
if [ -n "$old" ] && [ "$old" != "$new" ]; then
	docker rmi "$old" >/dev/null 2>&1 || true
fi
echo "built $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.1f MB", $1/1e6}'))"
