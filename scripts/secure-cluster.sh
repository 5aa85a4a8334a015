#!/usr/bin/env bash
# A secure 3-node fenced cluster in one command: a development CA and
# certificates (fencectl tls init), TLS on every node's API, mutual TLS between
# nodes, and clients authenticated by certificate.
#
#   scripts/secure-cluster.sh            # local processes on 127.0.0.1:7710, 7720, 7730
#   scripts/secure-cluster.sh stop       # stop them (the data and certificates stay)
#   scripts/secure-cluster.sh docker     # the same with docker-compose (docker-compose.tls.yml)
#   scripts/secure-cluster.sh docker-stop
#
# Local processes keep everything in FENCED_DIR (default ./secure-cluster):
# tls/ (the certificates), n1..n3/ (data), n1..n3.log and pids. The compose
# cluster reads its certificates from ./tls, and takes the compose file's
# FENCED1_PORT.. and COMPOSE_PROJECT_NAME from the environment. Both print the
# environment that points fencectl at the cluster as admin.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
	PATH=/usr/local/go/bin:$PATH
fi
dir=${FENCED_DIR:-$root/secure-cluster}
base=${FENCED_BASE_PORT:-7710}
nodes=(n1 n2 n3)

build() {
	CGO_ENABLED=0 go build -o bin/ ./cmd/fenced ./cmd/fencectl
}

# certs DIR [HOSTS]: makes the CA and certificates once.
certs() {
	if [ -f "$1/ca.pem" ]; then
		echo "using the certificates in $1"
		return
	fi
	bin/fencectl tls init --dir "$1" --nodes n1,n2,n3 ${2:+--hosts "$2"} >/dev/null
	echo "created a development CA and certificates in $1"
}

# wait_ready ENDPOINT CA: polls readiness for up to 30 seconds.
wait_ready() {
	for _ in $(seq 1 60); do
		if bin/fencectl health --endpoints "$1" --cacert "$2" --timeout 1s >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.5
	done
	echo "$1 is not ready after 30s" >&2
	return 1
}

print_env() { # CA ENDPOINTS
	cat <<EOT

A secure 3-node cluster is up. As admin:

  export FENCE_ENDPOINTS=$2
  export FENCE_CACERT=$1 FENCE_CERT=$(dirname "$1")/admin.pem FENCE_KEY_FILE=$(dirname "$1")/admin-key.pem
  bin/fencectl status

As a client (role client, holders "client" and "client/..."), use
$(dirname "$1")/client.pem and client-key.pem instead.
EOT
}

up() {
	build
	mkdir -p "$dir"
	certs "$dir/tls"
	if [ -f "$dir/pids" ]; then
		echo "a cluster of $dir is running (pids in $dir/pids); run '$0 stop' first" >&2
		exit 1
	fi
	local peers="" eps="" i=0
	for n in "${nodes[@]}"; do
		peers+="${peers:+,}$n=127.0.0.1:$((base + 10 * i + 1))"
		eps+="${eps:+,}https://127.0.0.1:$((base + 10 * i))"
		i=$((i + 1))
	done
	i=0
	for n in "${nodes[@]}"; do
		local t="$dir/tls/$n"
		setsid bin/fenced --id "$n" --data-dir "$dir/$n" \
			--http-addr "127.0.0.1:$((base + 10 * i))" --raft-addr "127.0.0.1:$((base + 10 * i + 1))" --peers "$peers" \
			--tls-cert "$t/server.pem" --tls-key "$t/server-key.pem" --tls-ca "$dir/tls/ca.pem" \
			--peer-tls-cert "$t/peer.pem" --peer-tls-key "$t/peer-key.pem" --peer-tls-ca "$dir/tls/ca.pem" \
			>>"$dir/$n.log" 2>&1 </dev/null &
		echo $! >>"$dir/pids"
		i=$((i + 1))
	done
	for ep in ${eps//,/ }; do
		wait_ready "$ep" "$dir/tls/ca.pem"
	done
	print_env "$dir/tls/ca.pem" "$eps"
}

stop() {
	if [ ! -f "$dir/pids" ]; then
		echo "no cluster of $dir is running"
		return
	fi
	while read -r pid; do
		kill "$pid" 2>/dev/null || true
	done <"$dir/pids"
	rm -f "$dir/pids"
	echo "stopped; the data and certificates stay in $dir"
}

docker_up() {
	build
	certs tls fenced1,fenced2,fenced3
	# The image runs as uid 65532, which cannot read keys only their owner
	# may read. A development cluster on one machine makes the node keys
	# readable; give real deployments keys owned by the container's user.
	chmod a+r tls/n*/*-key.pem
	scripts/docker-build.sh
	docker-compose -f docker-compose.yml -f docker-compose.tls.yml up -d
	local eps=""
	for port in "${FENCED1_PORT:-7710}" "${FENCED2_PORT:-7720}" "${FENCED3_PORT:-7730}"; do
		wait_ready "https://127.0.0.1:$port" tls/ca.pem
		eps+="${eps:+,}https://127.0.0.1:$port"
	done
	print_env "$root/tls/ca.pem" "$eps"
}

case "${1:-up}" in
up) up ;;
stop) stop ;;
docker) docker_up ;;
docker-stop) docker-compose -f docker-compose.yml -f docker-compose.tls.yml down ;;
*)
	echo "usage: $0 [up|stop|docker|docker-stop]" >&2
	exit 2
	;;
esac
