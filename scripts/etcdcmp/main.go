// Command etcdcmp runs a 3-member etcd cluster on loopback and drives it with
// the etcd counterparts of fencectl bench's workloads, so that the two can be
// measured side by side on one machine (scripts/bench-vs-etcd.sh).
//
// Workloads: txn (compare-and-create of a fresh key, the analogue of an
// acquire), lock (concurrency.Mutex Lock+Unlock on a key per client, the
// analogue of a cycle), contended (the same on one key), read (a
// linearizable Get, the analogue of verify), keepalive (KeepAliveOnce), and
// the nearest recipes to fenced's lock shapes: rwread (RLock and RUnlock of
// one recipe.RWMutex from etcd's experimental recipes, the analogue of
// shared-cycle) and multi (concurrency.Mutex on each of two keys, locked in
// sorted order and unlocked in reverse, the analogue of multi-cycle, over
// the same ring of 8 keys). etcd ships no semaphore, so sem-cycle has no
// counterpart here.
// Output: one line "WORKLOAD CLIENTS OPS_PER_SEC P50_MS P99_MS".
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
	"go.etcd.io/etcd/server/v3/embed"
)

// serve runs member name until interrupted.
func serve(name, dir string, i int, cluster string) {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", 23790+i*10))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", 23791+i*10))
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cluster
	cfg.LogLevel = "error"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatal(err)
	}
	<-e.Server.ReadyNotify()
	fmt.Println("ready", name)
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	<-c
	e.Close()
}

func main() {
	mode := flag.String("mode", "bench", "serve, leader (print the leader's endpoint) or bench")
	idx := flag.Int("i", 1, "member index")
	dir := flag.String("dir", "", "data dir")
	w := flag.String("w", "txn", "workload: "+strings.Join(workloads, " "))
	clients := flag.Int("c", 1, "clients")
	dur := flag.Duration("d", 5*time.Second, "duration")
	ep := flag.String("ep", "127.0.0.1:23800", "endpoint")
	flag.Parse()
	if *mode == "serve" {
		var parts []string
		for j := 1; j <= 3; j++ {
			parts = append(parts, fmt.Sprintf("e%d=http://127.0.0.1:%d", j, 23791+j*10))
		}
		serve(fmt.Sprintf("e%d", *idx), *dir, *idx, strings.Join(parts, ","))
		return
	}
	if *mode == "leader" {
		for j := 1; j <= 3; j++ {
			e := fmt.Sprintf("127.0.0.1:%d", 23790+j*10)
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e}, DialTimeout: 2 * time.Second})
			if err != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := cli.Status(ctx, e)
			cancel()
			cli.Close()
			if err == nil && st.Leader == st.Header.MemberId {
				fmt.Println(e)
				return
			}
		}
		os.Exit(1)
	}
	if !slices.Contains(workloads, *w) {
		log.Fatalf("unknown workload %q (one of %s)", *w, strings.Join(workloads, " "))
	}
	bench(*w, *clients, *dur, *ep)
}

// workloads are the names -w takes.
var workloads = []string{"txn", "lock", "contended", "read", "keepalive", "rwread", "multi"}

// multiRing is the number of keys multi's sets are drawn from, as
// fencectl bench's multi-cycle draws them: client c takes keys c and c+1
// (mod multiRing).
const multiRing = 8

// multiKeys is client c's two-key set in the order it locks them: sorted,
// one order for every client, so that two clients never wait on each other
// in a cycle (the usual way to lock several etcd mutexes without deadlock).
func multiKeys(c int) []string {
	ks := []string{fmt.Sprintf("multi/%d", c%multiRing), fmt.Sprintf("multi/%d", (c+1)%multiRing)}
	sort.Strings(ks)
	return ks
}

// lockAll locks a mutex of sess on each key in order, then unlocks them in
// reverse: one multi operation.
func lockAll(ctx context.Context, sess *concurrency.Session, keys []string) error {
	var held []*concurrency.Mutex
	var err error
	for _, k := range keys {
		m := concurrency.NewMutex(sess, k)
		if err = m.Lock(ctx); err != nil {
			break
		}
		held = append(held, m)
	}
	for i := len(held) - 1; i >= 0; i-- {
		if uerr := held[i].Unlock(ctx); err == nil {
			err = uerr
		}
	}
	return err
}

// bench runs workload w with n clients for d against endpoint ep.
func bench(w string, n int, d time.Duration, ep string) {
	ctx := context.Background()
	var lats []time.Duration
	var mu sync.Mutex
	var ops atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	var shared *clientv3.Client
	for c := 0; c < n; c++ {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
		if err != nil {
			log.Fatal(err)
		}
		if shared == nil {
			shared = cli
		}
		wg.Add(1)
		go func(c int, cli *clientv3.Client) {
			defer wg.Done()
			var local []time.Duration
			var sess *concurrency.Session
			lockKey := fmt.Sprintf("l/%d", c) // a key per client, or one for all
			if w == "contended" {
				lockKey = "contended"
			}
			var lease clientv3.LeaseID
			if w == "lock" || w == "contended" || w == "rwread" || w == "multi" {
				s, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
				if err != nil {
					log.Fatal(err)
				}
				sess = s
			}
			if w == "keepalive" || w == "read" {
				g, err := cli.Grant(ctx, 30)
				if err != nil {
					log.Fatal(err)
				}
				lease = g.ID
				cli.Put(ctx, fmt.Sprintf("r/%d", c), "v", clientv3.WithLease(lease))
			}
			for i := 0; time.Now().Before(stop); i++ {
				t0 := time.Now()
				var err error
				switch w {
				case "txn":
					k := fmt.Sprintf("t/%d/%d/%d", time.Now().UnixNano(), c, i)
					_, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, "h")).Commit()
				case "lock", "contended":
					m := concurrency.NewMutex(sess, lockKey)
					if err = m.Lock(ctx); err == nil {
						err = m.Unlock(ctx)
					}
				case "rwread":
					// One RWMutex per operation, as the recipe keeps the
					// key it made until its unlock.
					rw := recipe.NewRWMutex(sess, "shared")
					if err = rw.RLock(); err == nil {
						err = rw.RUnlock()
					}
				case "multi":
					err = lockAll(ctx, sess, multiKeys(c))
				case "read":
					_, err = cli.Get(ctx, fmt.Sprintf("r/%d", c))
				case "keepalive":
					_, err = cli.KeepAliveOnce(ctx, lease)
				}
				if err != nil {
					log.Print(err)
					continue
				}
				local = append(local, time.Since(t0))
				ops.Add(1)
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}(c, cli)
	}
	wg.Wait()
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	p := func(q float64) float64 {
		if len(lats) == 0 {
			return 0
		}
		return float64(lats[int(q*float64(len(lats)-1))].Microseconds()) / 1000
	}
	fmt.Printf("%s %d %d %.2f %.2f\n", w, n, int(float64(ops.Load())/d.Seconds()), p(0.5), p(0.99))
}
