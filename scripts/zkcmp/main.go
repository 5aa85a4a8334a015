// Command zkcmp runs a 3-server ZooKeeper ensemble on loopback and drives it
// with the ZooKeeper counterparts of fencectl bench's workloads, so that
// fenced and ZooKeeper can be measured side by side on one machine
// (scripts/bench-vs-etcd.sh with SYSTEMS naming zookeeper).
//
// Modes:
//
//	zkcmp -mode serve -i N -dir DIR   write DIR/zoo.cfg and DIR/myid, then become server N (exec java)
//	zkcmp -mode leader                print the client address of the leader (the "srvr" four-letter word)
//	zkcmp -mode ports                 list the ports the ensemble listens on
//	zkcmp -mode check                 exit 1, saying why, when java or ZooKeeper is missing
//	zkcmp -w WORKLOAD -c N -d 5s -warmup 2s -ep ADDR
//
// The servers keep ZooKeeper's defaults (forceSync=yes: every transaction
// log write is fsynced before it is acknowledged) apart from what a
// benchmark on one machine needs: loopback ports, no admin HTTP server, no
// per-address connection cap, and the four-letter words allowed.
//
// Workloads (one operation each), with every client connected to the leader:
//
//	acquire              the lock recipe's uncontended acquire of a fresh lock: one multi
//	                     creating the lock node and an ephemeral-sequential child, then
//	                     getChildren confirming the child is the lowest (fencectl bench
//	                     acquire: a fresh key per operation, never released)
//	cycle                acquire (create ephemeral-sequential + getChildren) then delete,
//	                     on one of 64 lock nodes per client (fencectl bench cycle)
//	verify               sync + getData of the client's own lock child: answered by the
//	                     leader without a quorum round of its own, so a weaker read than
//	                     fenced's verify
//	verify-linearizable  multi(check version) of the client's own lock child: a
//	                     conditional transaction committed through the quorum, the
//	                     linearizable way to confirm the lock is still held
//
// Each run first drives its workload for -warmup unmeasured: the servers
// are Java, and a fresh JVM runs its first seconds interpreted, where a
// deployed ensemble has long been compiled.
//
// Output: one line "WORKLOAD CLIENTS OPS_PER_SEC P50_MS P99_MS".
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"time"
)

func main() {
	mode := flag.String("mode", "bench", "serve, leader (print the leader's client address), ports (list the ensemble's ports), check (is ZooKeeper installed) or bench")
	idx := flag.Int("i", 1, "server index (1-3)")
	dir := flag.String("dir", "", "data dir of the server (serve)")
	w := flag.String("w", Acquire, "workload: acquire cycle verify verify-linearizable")
	clients := flag.Int("c", 1, "clients")
	dur := flag.Duration("d", 5*time.Second, "duration")
	warmup := flag.Duration("warmup", 2*time.Second, "how long to run the workload unmeasured first")
	ep := flag.String("ep", ClientAddr(1), "the server the clients connect to (the leader)")
	flag.Parse()
	switch *mode {
	case "serve":
		if *dir == "" || *idx < 1 || *idx > Servers {
			log.Fatalf("zkcmp: serve needs -dir and -i in 1..%d", Servers)
		}
		if err := Serve(*idx, *dir); err != nil {
			log.Fatalf("zkcmp: %v", err)
		}
	case "check":
		if _, _, err := javaCommand(); err != nil {
			fmt.Fprintln(os.Stderr, "zkcmp:", err)
			os.Exit(1)
		}
	case "ports":
		for _, p := range Ports() {
			fmt.Println(p)
		}
	case "leader":
		lead, err := Leader(2 * time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, "zkcmp:", err)
			os.Exit(1)
		}
		fmt.Println(lead)
	case "bench":
		// A request to a server that went away waits for a reconnection
		// that may never come: give up well after the run should have ended.
		time.AfterFunc(*warmup+*dur+3*time.Minute, func() {
			log.Fatalf("zkcmp: %s: no end three minutes after the run's duration", *w)
		})
		r, err := Bench(*w, *clients, *dur, *warmup, *ep)
		if err != nil {
			log.Fatalf("zkcmp: %v", err)
		}
		if r.Errors > 0 {
			fmt.Fprintf(os.Stderr, "zkcmp: %s: %d operations failed, the first: %v\n", *w, r.Errors, r.FirstErr)
		}
		if r.Ops == 0 {
			log.Fatalf("zkcmp: %s: no operation succeeded", *w)
		}
		fmt.Println(r)
	default:
		log.Fatalf("zkcmp: unknown mode %q (serve, leader, ports, check or bench)", *mode)
	}
}
