package main

// Discovery of the initial cluster from a DNS pattern of stable names, as a
// StatefulSet gives its pods: --peers-from-dns fenced-{0..2}.fenced:7701.
//
// The names are the ones the cluster starts with. Every node derives its id
// (the first DNS label: fenced-0) and its advertised addresses from its own
// name. Only the first name of the range (ordinal 0) may bootstrap, and only
// while its data dir is new, every name resolves, and every other name's HTTP
// API answers that it has no state: then it bootstraps a cluster of itself
// and the others join it. A node that finds any peer with state joins that
// cluster instead, so a node that lost its volume never starts a second
// cluster next to the first. Anything it cannot prove, it waits on.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
)

// maxDiscoveryNames bounds the range of a pattern: a Raft cluster of more
// voters than this is a mistake, and a typo such as {0..1000} must not make
// a node resolve a thousand names.
const maxDiscoveryNames = 15

// discoveryProbeTimeout bounds one look-up or one status request to a peer.
const discoveryProbeTimeout = 3 * time.Second

// discoveryInterval is how long a waiting node sleeps between two rounds of
// look-ups.
const discoveryInterval = 2 * time.Second

// errBadPattern is returned for a --peers-from-dns value that is not of the
// form NAME-{FIRST..LAST}.DOMAIN:PORT.
var errBadPattern = errors.New("--peers-from-dns: want NAME-{FIRST..LAST}[.DOMAIN]:PORT, e.g. fenced-{0..2}.fenced:7701")

// discoveryOptions is the --peers-from-dns flag and what it resolves to.
type discoveryOptions struct {
	pattern string

	parsed  *dnsPattern
	ordinal int    // this node's ordinal in the pattern's naming
	http    string // the HTTP port of every node, from --http-addr
}

func (d *discoveryOptions) register(fs *pflag.FlagSet) {
	fs.StringVar(&d.pattern, "peers-from-dns", "", "derive the cluster from stable DNS names, NAME-{FIRST..LAST}.DOMAIN:RAFTPORT (a StatefulSet's pods); the id defaults to the first label of the host name, and only the first name may bootstrap")
}

// enabled reports whether the node discovers its peers from DNS.
func (d *discoveryOptions) enabled() bool { return d.parsed != nil }

// dnsPattern is a parsed --peers-from-dns value: the names
// prefix+N+suffix for N in first..last, and the Raft port.
type dnsPattern struct {
	prefix, suffix string // around the range; prefix has no dot
	first, last    int
	port           string
}

// parseDNSPattern reads NAME-{FIRST..LAST}[.DOMAIN]:PORT. The range must sit
// in the first label, so that every name has its own id.
func parseDNSPattern(s string) (*dnsPattern, error) {
	host, port, err := net.SplitHostPort(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadPattern, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("%w: port %q", errBadPattern, port)
	}
	open, end := strings.Index(host, "{"), strings.Index(host, "}")
	if open < 0 || end < open || strings.Count(host, "{") != 1 || strings.Count(host, "}") != 1 {
		return nil, fmt.Errorf("%w: one {FIRST..LAST} range is needed", errBadPattern)
	}
	p := &dnsPattern{prefix: host[:open], suffix: host[end+1:], port: port}
	if strings.Contains(p.prefix, ".") || strings.Contains(labelOf(p.suffix), "{") {
		return nil, fmt.Errorf("%w: the range must be in the first label, which is the node id", errBadPattern)
	}
	lo, hi, ok := strings.Cut(host[open+1:end], "..")
	if !ok {
		return nil, fmt.Errorf("%w: range %q", errBadPattern, host[open:end+1])
	}
	if p.first, err = parseOrdinal(lo); err == nil {
		p.last, err = parseOrdinal(hi)
	}
	if err != nil || p.last < p.first {
		return nil, fmt.Errorf("%w: range %q", errBadPattern, host[open:end+1])
	}
	if p.last-p.first+1 > maxDiscoveryNames {
		return nil, fmt.Errorf("%w: at most %d names", errBadPattern, maxDiscoveryNames)
	}
	for _, h := range []string{p.host(p.first), p.host(p.last)} {
		if err := checkHostName(h); err != nil {
			return nil, fmt.Errorf("%w: %v", errBadPattern, err)
		}
	}
	return p, nil
}

// parseOrdinal reads a non-negative decimal number without sign or leading
// zeros, as a StatefulSet writes ordinals.
func parseOrdinal(s string) (int, error) {
	if s == "" || len(s) > 6 || (len(s) > 1 && s[0] == '0') || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("ordinal %q", s)
	}
	return strconv.Atoi(s)
}

// labelOf returns the first DNS label of a host name.
func labelOf(host string) string {
	label, _, _ := strings.Cut(host, ".")
	return label
}

// checkHostName accepts host names of RFC 1123 labels: letters, digits and
// inner hyphens, at most 63 bytes each.
func checkHostName(h string) error {
	if h == "" || len(h) > 253 {
		return fmt.Errorf("host name %q", h)
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("host name %q: bad label %q", h, l)
		}
		for _, c := range l {
			if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return fmt.Errorf("host name %q: bad label %q", h, l)
			}
		}
	}
	return nil
}

// host returns the name of ordinal n.
func (p *dnsPattern) host(n int) string { return p.prefix + strconv.Itoa(n) + p.suffix }

// id returns the node id of ordinal n: the first label of its name.
func (p *dnsPattern) id(n int) string { return labelOf(p.host(n)) }

// ordinalOf returns the ordinal of a node id of this naming; the id may lie
// outside the range (a node added by scaling up).
func (p *dnsPattern) ordinalOf(id string) (int, bool) {
	rest, ok := strings.CutPrefix(id, p.prefix)
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, labelOf(p.suffix))
	if !ok {
		return 0, false
	}
	n, err := parseOrdinal(digits)
	return n, err == nil && p.id(n) == id
}

// check validates --peers-from-dns against the other flags and fills in what
// it implies: the id (from the host name), the advertised addresses (from
// this node's name), and --join (the other names' HTTP APIs), so the rest of
// start-up treats the node as one that joins unless it bootstraps.
func (d *discoveryOptions) check(o *options, hostname func() (string, error)) error {
	if d.pattern == "" {
		return nil
	}
	if o.peers != "" || o.join != "" || o.dev {
		return errors.New("--peers-from-dns replaces --peers, --join and --dev: give only one of them")
	}
	p, err := parseDNSPattern(d.pattern)
	if err != nil {
		return err
	}
	if o.id == "" {
		h, err := hostname()
		if err != nil {
			return fmt.Errorf("--peers-from-dns: no --id, and the host name is unknown: %w", err)
		}
		o.id = labelOf(h)
	}
	n, ok := p.ordinalOf(o.id)
	if !ok {
		return fmt.Errorf("--peers-from-dns: node id %q is not a name of %q (want %s)", o.id, d.pattern, p.id(p.first))
	}
	_, httpPort, err := net.SplitHostPort(o.httpAddr)
	if err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	d.parsed, d.ordinal, d.http = p, n, httpPort
	if o.raftAdvertise == "" {
		o.raftAdvertise = net.JoinHostPort(p.host(n), p.port)
	}
	if o.httpAdvertise == "" {
		o.httpAdvertise = net.JoinHostPort(p.host(n), httpPort)
	}
	o.join = strings.Join(d.httpAddrs(nil), ",")
	if o.join == "" {
		// The only name of a one-name pattern: a cluster of one.
		o.dev = true
	}
	return nil
}

// names returns the pattern's names other than this node's.
func (d *discoveryOptions) names() []int {
	var ns []int
	for n := d.parsed.first; n <= d.parsed.last; n++ {
		if n != d.ordinal {
			ns = append(ns, n)
		}
	}
	return ns
}

// httpAddrs returns the HTTP addresses of the other names, or of those in
// only when it is not nil.
func (d *discoveryOptions) httpAddrs(only []int) []string {
	if only == nil {
		only = d.names()
	}
	var addrs []string
	for _, n := range only {
		addrs = append(addrs, net.JoinHostPort(d.parsed.host(n), d.http))
	}
	return addrs
}

// isFirst reports whether this node may bootstrap: it is the first name.
func (d *discoveryOptions) isFirst() bool { return d.ordinal == d.parsed.first }

// peerReport is what one round of discovery learned about one name.
type peerReport struct {
	ordinal  int
	id       string
	resolved bool  // the name resolved
	answered bool  // its HTTP API answered with its status
	hasState bool  // it has a configuration, a term or a log
	hasSelf  bool  // its configuration names this node's id
	err      error // why it did not resolve or answer
}

// action is what discovery decided.
type action int

const (
	// actWait: not enough is known to bootstrap, and there is nothing to
	// join yet.
	actWait action = iota
	// actWaitRemoval: a peer's configuration still holds this node's id; the
	// operator must remove the old member before this node, without data,
	// may take part.
	actWaitRemoval
	actBootstrap
	actJoin
)

func (a action) String() string {
	switch a {
	case actWaitRemoval:
		return "wait-for-removal"
	case actBootstrap:
		return "bootstrap"
	case actJoin:
		return "join"
	}
	return "wait"
}

// plan is a decision and why it was taken; join lists the ordinals to join
// through.
type plan struct {
	act    action
	join   []int
	reason string
}

// decide is the whole policy, for a node with no state of its own:
//   - a peer whose configuration still names this node: wait, because the
//     operator must remove the old member first (a member that lost its
//     data must never come back under its old identity);
//   - any peer with state: join through those peers;
//   - the first name, every name resolved and every other one answered
//     without state: bootstrap;
//   - anything else: wait.
func decide(selfID string, first, selfResolved bool, reports []peerReport) plan {
	var stateful []int
	for _, r := range reports {
		if r.hasSelf {
			return plan{act: actWaitRemoval, reason: fmt.Sprintf("the cluster that %s knows still has a member %q: remove it first (fencectl members remove %s); this node has no data and joins as a new member", r.id, selfID, selfID)}
		}
		if r.hasState {
			stateful = append(stateful, r.ordinal)
		}
	}
	if len(stateful) > 0 {
		return plan{act: actJoin, join: stateful, reason: "a peer has a cluster"}
	}
	if !first {
		return plan{act: actWait, reason: "no peer has a cluster yet; only the first name bootstraps it"}
	}
	var missing []string
	if !selfResolved {
		missing = append(missing, selfID+" (this node) does not resolve")
	}
	for _, r := range reports {
		switch {
		case !r.resolved:
			missing = append(missing, r.id+" does not resolve")
		case !r.answered:
			missing = append(missing, r.id+" does not answer")
		}
	}
	if len(missing) > 0 {
		return plan{act: actWait, reason: "cannot prove that no peer has state: " + strings.Join(missing, ", ")}
	}
	return plan{act: actBootstrap, reason: "every name resolves and no peer has state"}
}

// hostResolver is the part of *net.Resolver discovery uses.
type hostResolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// statusGetter asks one node for its status (*client.Client does).
type statusGetter interface {
	NodeStatus(ctx context.Context, endpoint string) (*client.Status, error)
}

// prober runs one round of look-ups: it resolves every name and asks every
// other name's HTTP API for its status, all at once.
type prober struct {
	d        *discoveryOptions
	selfID   string
	resolver hostResolver
	status   statusGetter
	// endpoints maps an ordinal to the endpoint status is asked at (with the
	// scheme the client needs).
	endpoints map[int]string
}

func (p *prober) round(ctx context.Context) (selfResolved bool, reports []peerReport) {
	names := p.d.names()
	reports = make([]peerReport, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i] = p.probe(ctx, n)
		}()
	}
	selfResolved = p.resolves(ctx, p.d.parsed.host(p.d.ordinal)) == nil
	wg.Wait()
	return selfResolved, reports
}

func (p *prober) resolves(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, discoveryProbeTimeout)
	defer cancel()
	addrs, err := p.resolver.LookupHost(ctx, host)
	if err == nil && len(addrs) == 0 {
		err = fmt.Errorf("%s: no address", host)
	}
	return err
}

func (p *prober) probe(ctx context.Context, n int) peerReport {
	r := peerReport{ordinal: n, id: p.d.parsed.id(n)}
	if r.err = p.resolves(ctx, p.d.parsed.host(n)); r.err != nil {
		return r
	}
	r.resolved = true
	ctx, cancel := context.WithTimeout(ctx, discoveryProbeTimeout)
	defer cancel()
	st, err := p.status.NodeStatus(ctx, p.endpoints[n])
	if err != nil {
		r.err = err
		return r
	}
	r.answered = true
	r.hasState = len(st.Members) > 0 || st.Term > 0 || st.LastIndex > 0
	for _, m := range st.Members {
		r.hasSelf = r.hasSelf || m.ID == p.selfID
	}
	return r
}

// newProber builds the prober of a running fenced: the system resolver and
// the node's own API client (its TLS settings and credentials).
func newProber(d *discoveryOptions, o *options) *prober {
	names := d.names()
	c := o.loaded.apiClient(d.httpAddrs(names))
	eps := c.Endpoints()
	p := &prober{d: d, selfID: o.id, resolver: net.DefaultResolver, status: c, endpoints: map[int]string{}}
	for i, n := range names {
		p.endpoints[n] = eps[i]
	}
	return p
}

// await runs rounds until the decision is one of want, settled reports
// true, or ctx ends. The reason is logged each time it changes, so a waiting
// node says why.
func (p *prober) await(ctx context.Context, log hclog.Logger, interval time.Duration, settled func() bool, want ...action) (plan, error) {
	last := ""
	for {
		if settled != nil && settled() {
			return plan{act: actWait, reason: "settled"}, nil
		}
		selfResolved, reports := p.round(ctx)
		pl := decide(p.selfID, p.d.isFirst(), selfResolved, reports)
		if pl.act == actBootstrap && !slices.Contains(want, actBootstrap) {
			pl = plan{act: actWait, reason: "no peer has a cluster, and this node cannot bootstrap one: its data dir was used before; empty it to let it bootstrap"}
		}
		for _, w := range want {
			if pl.act == w {
				log.Info("discovery decided", "action", pl.act.String(), "reason", pl.reason)
				return pl, nil
			}
		}
		if pl.reason != last {
			log.Info("discovery is waiting", "reason", pl.reason, "peers", summarize(reports))
			last = pl.reason
		}
		select {
		case <-ctx.Done():
			return plan{}, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// summarize lists each name with what became of it, for the log.
func summarize(reports []peerReport) []string {
	var out []string
	for _, r := range reports {
		s := r.id + ": "
		switch {
		case r.hasState:
			s += "has a cluster"
		case r.answered:
			s += "no state"
		case r.err != nil:
			s += r.err.Error()
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// dataDirUsed reports whether the data dir was opened by fenced before: it
// holds a log store or a snapshot. Such a node never bootstraps through
// discovery, even if its store is still empty: it may have been told to join.
func dataDirUsed(dir string) bool {
	if cluster.StoreKind(dir) != "" {
		return true
	}
	entries, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	return err == nil && len(entries) > 0
}

// initialPeers runs before the node starts, on a new data dir only (a node
// that restarts skips it). Every such node first waits while a peer's
// configuration still holds its id: Raft is not started, so the leader
// cannot take a node without data for the old member (whose votes and log
// it no longer has). The first name then waits until it can decide: it
// bootstraps a cluster of itself (the peers it returns) or joins. The others
// go on at once, to serve their API (the first name asks it) and join.
func (d *discoveryOptions) initialPeers(log hclog.Logger, o *options, peers []cluster.Peer) ([]cluster.Peer, error) {
	if !d.enabled() || dataDirUsed(o.dataDir) {
		return peers, nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	want := []action{actWait, actJoin}
	if d.isFirst() {
		want = []action{actBootstrap, actJoin}
	}
	pl, err := newProber(d, o).await(ctx, log.Named("discovery"), discoveryInterval, nil, want...)
	if err != nil {
		return nil, fmt.Errorf("stopped while discovering the cluster: %w", err)
	}
	switch pl.act {
	case actBootstrap:
		return []cluster.Peer{{ID: o.id, Addr: o.raftAdvertise}}, nil
	case actJoin:
		o.join = strings.Join(d.httpAddrs(pl.join), ",")
	}
	return peers, nil
}

// awaitJoin runs after the node started and serves its API (so that the
// first name can see it has no state), before it announces itself. A node
// without state waits here until some peer has a cluster; it then joins
// through the peers that have one. A node whose data dir was used before
// but holds no state may have been accepted already: when a peer's
// configuration holds it, or it receives state, it goes on (the leader
// catches it up).
func (d *discoveryOptions) awaitJoin(ctx context.Context, log hclog.Logger, node *cluster.Node, o *options) {
	if !d.enabled() {
		return
	}
	hasState := func() bool {
		st := node.Status()
		return st.Term > 0 || st.LastIndex > 0 || len(st.Members) > 0
	}
	if hasState() {
		return
	}
	pl, err := newProber(d, o).await(ctx, log.Named("discovery"), discoveryInterval, hasState, actJoin, actWaitRemoval)
	if err == nil && pl.act == actJoin {
		o.join = strings.Join(d.httpAddrs(pl.join), ",")
	}
}
