#!/usr/bin/env bash
# Measures fenced, etcd and ZooKeeper side by side on this machine: for each
# workload pair, RUNS alternating runs of each, every run on a fresh 3-node
# loopback cluster with the client on the same machine talking to the leader.
# Prints one line per run: SYSTEM WORKLOAD CLIENTS OPS_PER_SEC P50_MS P99_MS.
# Before the first run and after the last, scripts/floor measures this
# machine's floor in the same format, as SYSTEM "floor" (OPS_PER_SEC and
# P99_MS "-"): WORKLOAD acquire is three fsyncs at once and two round trips
# between processes, acquire-http the same with a net/http exchange in place
# of the client's round trip, and http that exchange alone (the floor of a
# verify or keepalive). FLOOR=0 leaves the floor out.
#
#   scripts/bench-vs-etcd.sh            # DURATION=5s RUNS=3 TRANSPORTS="std std-nobatch lean"
#   TRANSPORTS=std scripts/bench-vs-etcd.sh
#   WORKLOADS="verify keepalive" RUNS=5 scripts/bench-vs-etcd.sh
#   SYSTEMS="fenced zookeeper" TRANSPORTS=std scripts/bench-vs-etcd.sh
#
# SYSTEMS picks the systems (fenced, etcd, zookeeper; default all three).
# ZooKeeper is skipped, with a message, when java or Debian's zookeeper
# package is missing; it runs only the pairs it has a recipe for (acquire,
# cycle, verify, and beside verify its linearizable verify-linearizable).
#
# WORKLOADS limits the run to the pairs of these fenced workloads (acquire,
# cycle, contended, verify, keepalive: the default; and the lock shapes,
# run when named: sem-cycle, shared-cycle, multi-cycle). etcd ships no
# semaphore: sem-cycle runs fenced alone (its etcd side is "-").
#
# TRANSPORTS lists the fencectl bench --transport values to run fenced with
# (lean: the benchmark's own lean client transport; std: net/http's, as
# api.Client uses by default), each optionally with -nobatch (std-nobatch:
# --batching=false, one HTTP request per verify or keepalive); each is a
# SYSTEM of its own in the output (fenced, fenced-std, fenced-std-nobatch).
#
# Needs: Go, python3, free loopback ports 7810-7831 (fenced), 23800-23831
# (etcd) and 21810-21832 (ZooKeeper). The etcd side is scripts/etcdcmp and
# the ZooKeeper side scripts/zkcmp (their own modules: neither is a
# dependency of fenced).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5s}
RUNS=${RUNS:-3}
TRANSPORTS=${TRANSPORTS:-std std-nobatch lean}
WORKLOADS=${WORKLOADS:-acquire cycle contended verify keepalive}
SYSTEMS=${SYSTEMS:-fenced etcd zookeeper}
FLOOR=${FLOOR:-1}
has() { case " $SYSTEMS " in *" $1 "*) ;; *) return 1 ;; esac; }
if has zookeeper && ! (cd scripts/zkcmp && go run . -mode check); then
	echo "bench-vs-etcd: skipping ZooKeeper (apt-get install zookeeper to measure it)" >&2
	SYSTEMS=${SYSTEMS//zookeeper/}
fi
ports=()
has fenced && ports+=(7810 7811 7820 7821 7830 7831)
has etcd && ports+=(23800 23801 23810 23811 23820 23821)
has zookeeper && ports+=($(cd scripts/zkcmp && go run . -mode ports))
for port in "${ports[@]}"; do
	if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
		echo "bench-vs-etcd: 127.0.0.1:$port is in use; stop what listens there first" >&2
		exit 1
	fi
done
work=$(mktemp -d)
running=()
cleanup() {
	[ ${#running[@]} -eq 0 ] || kill "${running[@]}" 2>/dev/null || true
	# A benchmark client still running in the foreground (the script was
	# interrupted) is a child of this shell too.
	pkill -P $$ 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
if has fenced; then
	go build -o "$work/fenced" ./cmd/fenced
	go build -o "$work/fencectl" ./cmd/fencectl
fi
has etcd && (cd scripts/etcdcmp && go build -o "$work/etcdcmp" .)
has zookeeper && (cd scripts/zkcmp && go build -o "$work/zkcmp" .)
[ "$FLOOR" = 0 ] || go build -o "$work/floor" ./scripts/floor

# floor_run prints the machine's floor, measured on the disk the clusters
# write to ($work), as three lines of the runs' format.
floor_run() {
	[ "$FLOOR" = 0 ] && return
	"$work/floor" -dir "$work" -o json |
		python3 -c 'import json,sys; d=json.load(sys.stdin)
for w, k in (("acquire", "acquire_floor_ns"), ("acquire-http", "acquire_floor_over_http_ns"), ("http", "http_exchange_across_processes_p50_ns")):
    print("floor", w, 1, "-", round(d[k]/1e6, 3), "-")'
}

stop_all() {
	kill "$@" 2>/dev/null || true
	wait "$@" 2>/dev/null || true
	running=()
}

fenced_run() { # WORKLOAD CLIENTS TRANSPORT
	local base pids=() peers="n1=127.0.0.1:7811,n2=127.0.0.1:7821,n3=127.0.0.1:7831"
	base=$(mktemp -d -p "$work")
	for i in 1 2 3; do
		"$work/fenced" --id "n$i" --data-dir "$base/n$i" --http-addr "127.0.0.1:78${i}0" \
			--raft-addr "127.0.0.1:78${i}1" --peers "$peers" >"$base/n$i.log" 2>&1 &
		pids+=($!)
		running+=($!)
	done
	local eps=127.0.0.1:7810,127.0.0.1:7820,127.0.0.1:7830 lead=""
	for _ in $(seq 100); do
		lead=$("$work/fencectl" --endpoints "$eps" status -o json 2>/dev/null |
			python3 -c 'import json,sys; print(json.load(sys.stdin)["leader_http"])' 2>/dev/null) && [ -n "$lead" ] && break
		sleep 0.2
	done
	local name=fenced tr=${3%-nobatch} batching=true
	[ "$3" = lean ] || name="fenced-$3"
	[ "$tr" = "$3" ] || batching=false
	"$work/fencectl" --endpoints "$lead" bench "$1" --clients "$2" --duration "$DURATION" --transport "$tr" --batching="$batching" -o json 2>/dev/null |
		python3 -c 'import json,sys; d=json.load(sys.stdin)[0]; print(sys.argv[1], d["workload"], d["clients"], round(d["ops_per_sec"]), round(d["p50_ns"]/1e6, 2), round(d["p99_ns"]/1e6, 2))' "$name"
	stop_all "${pids[@]}"
	rm -rf "$base"
}

# cmp_run runs one workload of another system's driver (etcdcmp, zkcmp):
# a fresh 3-member cluster it serves, found by its leader mode within
# TRIES fifths of a second, then the benchmark against the leader.
cmp_run() { # DRIVER SYSTEM TRIES WORKLOAD CLIENTS
	local drv=$1 sys=$2 tries=$3 base pids=() lead=""
	base=$(mktemp -d -p "$work")
	for i in 1 2 3; do
		"$work/$drv" -mode serve -i "$i" -dir "$base/m$i" >"$base/m$i.log" 2>&1 &
		pids+=($!)
		running+=($!)
	done
	for _ in $(seq "$tries"); do
		lead=$("$work/$drv" -mode leader 2>/dev/null) && break
		sleep 0.2
	done
	echo -n "$sys "
	"$work/$drv" -w "$4" -c "$5" -d "$DURATION" -ep "$lead" 2>>"$base/bench.err" || echo "failed: $(tail -1 "$base/bench.err")"
	stop_all "${pids[@]}"
	rm -rf "$base"
}

etcd_run() { cmp_run etcdcmp etcd 100 "$@"; } # WORKLOAD CLIENTS
zk_run() { cmp_run zkcmp zookeeper 300 "$@"; } # WORKLOAD CLIENTS (a JVM starts slower)

# zk_workloads names ZooKeeper's counterparts of a fenced workload (none for
# contended and keepalive).
zk_workloads() {
	case $1 in
	acquire | cycle) echo "$1" ;;
	verify) echo "verify verify-linearizable" ;;
	esac
}

floor_run
for pair in "txn acquire 1" "txn acquire 16" "txn acquire 64" "lock cycle 1" "lock cycle 16" "lock cycle 64" \
	"contended contended 16" "contended contended 64" "read verify 1" "read verify 16" "read verify 64" \
	"keepalive keepalive 1" "keepalive keepalive 16" "keepalive keepalive 64" \
	"- sem-cycle 16" "- sem-cycle 64" "rwread shared-cycle 64" "multi multi-cycle 16"; do
	set -- $pair
	case " $WORKLOADS " in *" $2 "*) ;; *) continue ;; esac
	for _ in $(seq "$RUNS"); do
		if has etcd && [ "$1" != - ]; then etcd_run "$1" "$3"; fi
		if has fenced; then
			for tr in $TRANSPORTS; do
				fenced_run "$2" "$3" "$tr"
			done
		fi
		if has zookeeper; then
			for zw in $(zk_workloads "$2"); do
				zk_run "$zw" "$3"
			done
		fi
	done
done
floor_run
