// Command fenced is the fenced daemon: one node of a Raft cluster that grants
// fencing tokens over an HTTP API.
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/fenced/fenced/api"
	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/internal/buildinfo"
	"github.com/fenced/fenced/metrics"
)

const usage = `fenced — a Raft-replicated fencing-token coordinator.

Run with no flags for a single-node development server on 127.0.0.1:7700
(data in ./fenced-data). For a cluster, give every node the same --peers:

  fenced --id n1 --data-dir /var/lib/fenced \
         --http-addr 10.0.0.1:7700 --raft-addr 10.0.0.1:7701 \
         --peers n1=10.0.0.1:7701,n2=10.0.0.2:7701,n3=10.0.0.3:7701

or add a node to a running cluster with --join HOST:HTTPPORT.
Every flag can also be set by an environment variable: --data-dir is
FENCED_DATA_DIR, --peers is FENCED_PEERS, and so on.

Hooks, run beside a node with its flags and environment (docs/DEPLOY.md):

  fenced step-down   hand leadership over if this node leads
  fenced pre-stop    a StatefulSet pod's preStop hook: leave the cluster when
                     the StatefulSet was scaled below this pod's ordinal (read
                     with the pod's service account), else step down

Flags:
`

type options struct {
	id, dataDir                  string
	httpAddr, httpAdvertise      string
	raftAddr, raftAdvertise      string
	peers, join                  string
	dns                          discoveryOptions
	dev                          bool
	logFormat, logLevel          string
	heartbeat, election          time.Duration
	verifyConfirm                string
	snapshotThreshold            uint64
	snapshotInterval             time.Duration
	trailingLogs                 uint64
	raftStore                    string
	maxSeq                       uint64
	keyRetention                 time.Duration
	reclaimIgnoresEpoch          bool
	walSegmentSize               int // chaos builds only
	logStallBound                time.Duration
	ackUnwritten                 bool   // chaos builds only
	fsyncDelayFile               string // chaos builds only
	leaseRearmFull               bool
	noSync                       bool
	leaveOnTerminate             bool
	pprof                        bool
	shutdownTimeout              time.Duration
	readHeaderTimeout, idleTimeo time.Duration
	watchWriteTimeout            time.Duration
	corsOrigins                  string
	ui                           bool
	cors                         []string // corsOrigins, parsed
	sec                          securityOptions
	backup                       backupOptions
	loaded                       *security // the material sec names, once run loads it
	disk                         diskFloor
	version                      bool
	memoryLimit                  string
	gcHeadroom                   int
	signingKeyFile               string
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := pflag.NewFlagSet("fenced", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, usage)
		fs.PrintDefaults()
		fmt.Fprint(os.Stderr, securityUsage)
		printEnvUsage(os.Stderr, fs)
	}
	fs.BoolVar(&o.version, "version", false, "print the module version and VCS revision, and exit")
	fs.StringVar(&o.id, "id", "", "unique, stable node id (default \"dev\" in dev mode; required otherwise)")
	fs.StringVar(&o.dataDir, "data-dir", "fenced-data", "directory for the Raft log, stable store and snapshots")
	fs.StringVar(&o.signingKeyFile, "signing-key-file", "", "Ed25519 key (PKCS #8 PEM) this node signs grants' proofs with (default signing.key in --data-dir, made on first start)")
	fs.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:7700", "address of the HTTP API")
	fs.StringVar(&o.httpAdvertise, "http-advertise", "", "HTTP address other nodes use to reach this one (default --http-addr)")
	fs.StringVar(&o.raftAddr, "raft-addr", "127.0.0.1:7701", "address of the Raft transport")
	fs.StringVar(&o.raftAdvertise, "raft-advertise", "", "Raft address peers dial (default --raft-addr)")
	fs.StringVar(&o.peers, "peers", "", "initial cluster, id=raft-host:port,...; identical on every node, ignored once state exists")
	fs.StringVar(&o.join, "join", "", "HTTP address of any member of a running cluster to join (comma-separated list allowed)")
	o.dns.register(fs)
	fs.BoolVar(&o.dev, "dev", false, "run a single-node cluster (the default when neither --peers nor --join is given)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.DurationVar(&o.heartbeat, "heartbeat-timeout", time.Second, "Raft heartbeat timeout")
	fs.DurationVar(&o.election, "election-timeout", time.Second, "Raft election timeout: how long followers wait before electing a new leader")
	fs.StringVar(&o.verifyConfirm, "verify-confirm", cluster.VerifyByContact, "how a verify proves the leader it asks still leads: contact (a heartbeat a quorum accepted in the last 250 ms, resting on clocks as renewals do; a round when there is none) or round (a heartbeat round of its own per verify or shared batch of verifies, resting on no clock; about 0.2 ms more per verify)")
	fs.Uint64Var(&o.snapshotThreshold, "snapshot-threshold", 8192, "log entries between snapshots")
	fs.DurationVar(&o.snapshotInterval, "snapshot-interval", 30*time.Second, "how often to check whether to snapshot")
	fs.StringVar(&o.raftStore, "raft-store", "", "Raft log store: wal (raft-wal: one write and one fsync per append) or bolt (raft-boltdb: a transaction with two fsyncs per append); empty: the kind the data dir holds, wal for a new one (bolt with --unsafe-no-fsync)")
	fs.Uint64Var(&o.trailingLogs, "trailing-logs", 10240, "log entries kept after a snapshot; a follower further behind gets the snapshot instead")
	fs.DurationVar(&o.keyRetention, "key-retention", cluster.DefaultKeyRetention, "how long a key is kept after its last grant ended before the leader reclaims it (0: keys are never reclaimed)")
	registerUnsafe(fs, o)
	fs.BoolVar(&o.noSync, "unsafe-no-fsync", false, "do not fsync the Raft log (testing only: acknowledged grants can be lost on power failure)")
	o.disk.register(fs)
	fs.DurationVar(&o.logStallBound, "log-stall-bound", cluster.DefaultLogStallBound, "how long the leader's own raft log write (its fsync) may take before it stops leading so that the others elect a leader (a slow or stalled disk); 0 turns it off")
	fs.StringVar(&o.memoryLimit, "memory-limit", memoryLimitAuto, memoryLimitUsage)
	fs.IntVar(&o.gcHeadroom, "gc-headroom", defaultGCHeadroom, gcHeadroomUsage)
	fs.BoolVar(&o.pprof, "enable-pprof", false, "serve Go profiles at /debug/pprof/ on the HTTP address")
	fs.BoolVar(&o.leaveOnTerminate, "leave-on-terminate", false, "on SIGTERM, leave the cluster (hand leadership over, then remove this node) before exiting")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful shutdown may take")
	fs.DurationVar(&o.readHeaderTimeout, "http-read-header-timeout", 5*time.Second, "time allowed to read request headers")
	fs.DurationVar(&o.idleTimeo, "http-idle-timeout", 120*time.Second, "keep-alive idle timeout of HTTP connections")
	fs.DurationVar(&o.watchWriteTimeout, "watch-write-timeout", api.DefaultWatchWriteTimeout, "how long a watch stream waits for a watcher that does not read before it ends the stream")
	fs.StringVar(&o.corsOrigins, "cors-origins", "", "origins whose web pages may watch and read keys through a browser, comma-separated (https://console.example.com,...; * for any origin, without credentials); default none")
	fs.BoolVar(&o.ui, "ui", true, "serve the web console at /ui/ (docs/CONSOLE.md); it reads the cluster through this API with the credentials typed into it")
	o.sec.register(fs)
	o.backup.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.version {
		return o, nil
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := envFallback(fs); err != nil {
		return nil, err
	}
	if err := o.dns.check(o, os.Hostname); err != nil {
		return nil, err
	}
	if o.watchWriteTimeout <= 0 {
		return nil, fmt.Errorf("--watch-write-timeout must be positive, not %v", o.watchWriteTimeout)
	}
	var err error
	if o.cors, err = api.ParseCORSOrigins(o.corsOrigins); err != nil {
		return nil, fmt.Errorf("--cors-origins: %w", err)
	}
	if o.keyRetention < 0 {
		return nil, fmt.Errorf("--key-retention must not be negative, not %v", o.keyRetention)
	}
	if err := o.sec.check(); err != nil {
		return nil, err
	}
	if err := o.backup.check(); err != nil {
		return nil, err
	}
	if o.peers == "" && o.join == "" {
		o.dev = true
	}
	if o.dev && (o.peers != "" || o.join != "") {
		return nil, errors.New("--dev cannot be combined with --peers or --join")
	}
	if o.peers != "" && o.join != "" {
		return nil, errors.New("give --peers (bootstrap a new cluster) or --join (join a running one), not both")
	}
	if o.id == "" {
		if !o.dev {
			return nil, errors.New("--id is required with --peers or --join")
		}
		o.id = "dev"
	}
	if _, err := parseMemoryLimit(o.memoryLimit); err != nil {
		return nil, err
	}
	if err := o.disk.check(); err != nil {
		return nil, err
	}
	if o.verifyConfirm != cluster.VerifyByContact && o.verifyConfirm != cluster.VerifyByRound {
		return nil, fmt.Errorf("--verify-confirm must be %s or %s, not %q", cluster.VerifyByContact, cluster.VerifyByRound, o.verifyConfirm)
	}
	if o.logStallBound < 0 {
		return nil, fmt.Errorf("--log-stall-bound must not be negative, not %v", o.logStallBound)
	}
	if o.gcHeadroom < 0 || o.gcHeadroom > 100 {
		return nil, errGCHeadroom
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return nil, fmt.Errorf("--log-format must be text or json, not %q", o.logFormat)
	}
	if hclog.LevelFromString(o.logLevel) == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level %q is not a level", o.logLevel)
	}
	return o, nil
}

// envName is the environment variable of a flag: FENCED_ and the flag's
// name in capitals with dashes as underscores.
func envName(flag string) string {
	return "FENCED_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// printEnvUsage lists the environment variable of every flag, for --help.
func printEnvUsage(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprint(w, "\nEnvironment: every flag not given on the command line is read from its\nvariable (the command line wins):\n\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "version" {
			return
		}
		fmt.Fprintf(w, "  %-36s --%s\n", envName(f.Name), f.Name)
	})
}

// envFallback sets every flag not given on the command line from FENCED_<NAME>.
func envFallback(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || err != nil {
			return
		}
		name := envName(f.Name)
		if v, ok := os.LookupEnv(name); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s: %w", name, serr)
			}
		}
	})
	return err
}

func main() {
	if code, ran := runSubcommand(os.Args[1:]); ran {
		os.Exit(code)
	}
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fenced:", err)
		fmt.Fprintln(os.Stderr, "Run 'fenced --help' for usage.")
		os.Exit(2)
	}
	if o.version {
		fmt.Println("fenced", buildinfo.Read())
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "fenced:", err)
		os.Exit(1)
	}
}

func run(o *options) error {
	log := hclog.New(&hclog.LoggerOptions{
		Name: "fenced", Level: hclog.LevelFromString(o.logLevel), JSONFormat: o.logFormat == "json", Output: os.Stderr,
	}).With("node", o.id)
	if err := applyMemoryLimit(o.memoryLimit, log); err != nil {
		return err
	}
	peers, err := cluster.ParsePeers(o.peers)
	if err != nil {
		return fmt.Errorf("--peers: %w", err)
	}
	httpAdvertise := o.httpAdvertise
	if httpAdvertise == "" {
		httpAdvertise = o.httpAddr
	}
	if err := metrics.InstallRaftSink(); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	sec, err := loadSecurity(&o.sec)
	if err != nil {
		return err
	}
	o.loaded = sec
	backupAuth, err := o.backup.load(log)
	if err != nil {
		return err
	}
	raftServerTLS, raftClientTLS := sec.raftTLS()
	if peers, err = o.dns.initialPeers(log, o, peers); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("http listen: %w", err)
	}
	node, err := cluster.New(cluster.Config{
		ID: o.id, DataDir: o.dataDir, RaftBind: o.raftAddr, RaftAdvertise: o.raftAdvertise, HTTPAdvertise: httpAdvertise,
		Peers: peers, Bootstrap: o.dev, HeartbeatTimeout: o.heartbeat, ElectionTimeout: o.election,
		SnapshotThreshold: o.snapshotThreshold, SnapshotInterval: o.snapshotInterval, TrailingLogs: o.trailingLogs, Store: o.raftStore, MaxSeq: o.maxSeq, NoSync: o.noSync,
		RaftServerTLS: raftServerTLS, RaftClientTLS: raftClientTLS, Limits: sec.limits(),
		KeyRetention: o.keyRetention, ReclaimIgnoresEpoch: o.reclaimIgnoresEpoch, LeaseRearmFull: o.leaseRearmFull,
		WALSegmentSize: o.walSegmentSize, AckUnwrittenLog: o.ackUnwritten, LogStallBound: stallBound(o.logStallBound),
		WALFileSystem:  slowFsync(o.dataDir, o.fsyncDelayFile),
		DataDirMinFree: o.disk.bytes, DataDirMinFreePercent: o.disk.minFreePercent, PeerHasSpace: peerHasSpace(o),
		SigningKeyFile: o.signingKeyFile, VerifyConfirm: o.verifyConfirm, Logger: log,
	})
	if err != nil {
		ln.Close()
		return err
	}
	apiOpts := sec.apiOptions()
	apiOpts.WatchWriteTimeout = o.watchWriteTimeout
	apiOpts.CORSOrigins = o.cors
	handler := api.NewSecureServer(node, log, apiOpts)
	handler.SetBackupAuth(backupAuth)
	if o.ui {
		handler.EnableConsole()
	}
	if o.pprof {
		handler.Handle("/debug/pprof/", http.HandlerFunc(pprof.Index))
		handler.Handle("/debug/pprof/profile", http.HandlerFunc(pprof.Profile))
		handler.Handle("/debug/pprof/trace", http.HandlerFunc(pprof.Trace))
	}
	srv := &http.Server{
		Handler: handler, ReadHeaderTimeout: o.readHeaderTimeout, IdleTimeout: o.idleTimeo,
		MaxHeaderBytes: o.sec.maxHeaderBytes, ErrorLog: log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	stopReload := make(chan struct{})
	defer close(stopReload)
	go sec.reloadOnSIGHUP(log, stopReload)
	sec.warn(log, o.dev, o.id)
	go func() {
		if err := serveHTTP(srv, ln, sec); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "error", err)
		}
	}()
	log.Info("fenced started", "http", ln.Addr().String(), "raft", node.Addr(), "data_dir", o.dataDir, "dev", o.dev,
		"tls", sec.http != nil, "peer_tls", sec.peer != nil, "auth", sec.apiOptions().AuthEnabled())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	startGCTuner(ctx, o.gcHeadroom, log)
	o.dns.awaitJoin(ctx, log, node, o)
	go announce(ctx, log, node, o, httpAdvertise)
	select {
	case <-ctx.Done():
	case <-node.Failed():
		// The log store failed an fsync: the node already stopped Raft. The
		// process exits non-zero so its supervisor restarts it, and the
		// restart recovers from what is really on disk.
		_ = shutdown(log, node, srv, o.shutdownTimeout)
		return node.Err()
	}
	if o.leaveOnTerminate {
		leave(log, node, o.loaded.apiClient([]string{httpAdvertise}), o.shutdownTimeout)
	}
	return shutdown(log, node, srv, o.shutdownTimeout)
}

// announce makes sure the cluster knows this node and its HTTP address. A
// node that has never been a member joins through --join (or a leader it
// knows); a member whose recorded HTTP address differs records its own. A
// node that has been a member and is no longer in the configuration was
// removed: it never adds itself back (cluster.SelfRemoved), not even after a
// restart, so it never fights the operator who removed it. Adding it again
// is an operator's act (fencectl members add); it then records its address.
func announce(ctx context.Context, log hclog.Logger, node *cluster.Node, o *options, httpAdvertise string) {
	announced := false
	for {
		switch {
		case node.Self() == cluster.SelfRemoved:
			announced = false // an operator may add it back; then it records its address once
		case !announced && announceNeeded(node, o.id, httpAdvertise):
			announced = announceOnce(ctx, log, node, o, httpAdvertise)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// announceNeeded reports whether this node should ask the cluster to add it
// or to record its HTTP address. A member asks only while a leader is in
// contact with it (the leader still counts it as a member): a restarted node
// that missed its own removal hears from no leader and stays quiet. Once a
// join succeeded, the leader recorded the address with it, so announce asks
// at most once per run: a second join racing with a removal could undo it.
func announceNeeded(node *cluster.Node, id, httpAdvertise string) bool {
	switch node.Self() {
	case cluster.SelfRemoved, cluster.SelfJoining:
		return false
	case cluster.SelfMember:
		lid, _ := node.Leader()
		return lid != "" && (node.FSM().Members()[id] != httpAdvertise || !node.SigningKeyRegistered())
	}
	return !node.IsLeader()
}

// announceOnce sends one join to the leader, the --join addresses and the
// known members. A join the cluster accepted is recorded at once: should the
// node be removed before it even sees a configuration with itself, it must
// still know that it was a member.
func announceOnce(ctx context.Context, log hclog.Logger, node *cluster.Node, o *options, httpAdvertise string) bool {
	var targets []string
	if _, lhttp := node.Leader(); lhttp != "" {
		targets = append(targets, lhttp)
	}
	if o.join != "" {
		targets = append(targets, strings.Split(o.join, ",")...)
	}
	for id, addr := range node.FSM().Members() {
		if id != o.id && addr != "" {
			targets = append(targets, addr)
		}
	}
	if len(targets) == 0 || node.IsLeader() {
		return false
	}
	c := o.loaded.apiClient(targets)
	jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req := client.JoinRequest{ID: o.id, RaftAddr: node.Addr(), HTTPAddr: httpAdvertise,
		SigningKey: base64.RawURLEncoding.EncodeToString(node.Signer().Public().Public)}
	if err := c.Join(jctx, req); err != nil {
		log.Debug("join/announce not done yet", "targets", targets, "error", err)
		return false
	}
	node.RecordJoined()
	log.Info("announced to the cluster", "via", targets)
	return true
}

// leave removes this node from the cluster: leadership is handed over first,
// then the new leader takes the node out of the configuration, so the
// remaining members keep their quorum without it.
func leave(log hclog.Logger, node *cluster.Node, self *client.Client, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if node.Voters() <= 1 {
		log.Warn("the last member does not leave its own cluster")
		return
	}
	if err := self.Remove(ctx, node.ID()); err != nil {
		log.Error("leaving the cluster failed", "error", err)
		return
	}
	log.Info("left the cluster")
}

// shutdown hands leadership over first when this node leads, so the cluster
// does not wait an election timeout, then stops serving and closes Raft.
func shutdown(log hclog.Logger, node *cluster.Node, srv *http.Server, timeout time.Duration) error {
	log.Info("shutting down")
	if node.IsLeader() && node.Voters() > 1 {
		if err := node.TransferLeadership(""); err != nil {
			log.Warn("leadership transfer before shutdown failed", "error", err)
		}
	}
	// In-flight requests get a short grace; http.Server.Shutdown would wait
	// up to 5s even for connections that never sent a request. A request cut
	// off here is one its client retries: every write is idempotent.
	ctx, cancel := context.WithTimeout(context.Background(), min(timeout, 2*time.Second))
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
	}
	return closeWithin(node, timeout)
}

// closeWithin closes the node, giving up after timeout. Every log entry is on
// disk before it is acknowledged, so a node that exits without finishing its
// close is no worse off than one that crashed; a stuck close must not keep
// the process, and whatever supervises it, waiting forever.
func closeWithin(node *cluster.Node, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- node.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("raft did not stop within %v: exiting without a clean close", timeout)
	}
}
