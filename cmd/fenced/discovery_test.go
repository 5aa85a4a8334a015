package main

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
)

func TestParseDNSPattern(t *testing.T) {
	tests := []struct {
		in          string
		first, last int
		hosts       []string // first and last host
		ids         []string // first and last id
		err         string
	}{
		{in: "fenced-{0..2}.fenced:7701", first: 0, last: 2, hosts: []string{"fenced-0.fenced", "fenced-2.fenced"}, ids: []string{"fenced-0", "fenced-2"}},
		{in: "db-{0..4}.db.prod.svc.cluster.local:7701", first: 0, last: 4, hosts: []string{"db-0.db.prod.svc.cluster.local", "db-4.db.prod.svc.cluster.local"}, ids: []string{"db-0", "db-4"}},
		{in: "node{1..3}:9000", first: 1, last: 3, hosts: []string{"node1", "node3"}, ids: []string{"node1", "node3"}},
		{in: "n{0..0}-x.d:1", first: 0, last: 0, hosts: []string{"n0-x.d", "n0-x.d"}, ids: []string{"n0-x", "n0-x"}},
		{in: "fenced-{0..2}.fenced", err: "missing port"},
		{in: "fenced-{0..2}.fenced:0", err: "port"},
		{in: "fenced-{0..2}.fenced:http", err: "port"},
		{in: "fenced-0.fenced:7701", err: "range is needed"},
		{in: "fenced-{0..2}.{a..b}:7701", err: "range is needed"},
		{in: "fenced.svc-{0..2}:7701", err: "first label"},
		{in: "fenced-{2..0}.fenced:7701", err: "range"},
		{in: "fenced-{0..}.fenced:7701", err: "range"},
		{in: "fenced-{0-2}.fenced:7701", err: "range"},
		{in: "fenced-{00..2}.fenced:7701", err: "range"},
		{in: "fenced-{-1..2}.fenced:7701", err: "range"},
		{in: "fenced-{0..99}.fenced:7701", err: "at most"},
		{in: "fenced_{0..2}.fenced:7701", err: "bad label"},
		{in: "-{0..2}.fenced:7701", err: ""}, // "-0" starts with a hyphen
		{in: "fenced-{0..2}..fenced:7701", err: "bad label"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, err := parseDNSPattern(tt.in)
			if tt.err != "" || tt.hosts == nil {
				if err == nil {
					t.Fatalf("parsed %q as %+v; want an error", tt.in, p)
				}
				if !errors.Is(err, errBadPattern) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %q; want errBadPattern mentioning %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.first != tt.first || p.last != tt.last {
				t.Fatalf("range %d..%d; want %d..%d", p.first, p.last, tt.first, tt.last)
			}
			if got := []string{p.host(p.first), p.host(p.last)}; !reflect.DeepEqual(got, tt.hosts) {
				t.Fatalf("hosts %v; want %v", got, tt.hosts)
			}
			if got := []string{p.id(p.first), p.id(p.last)}; !reflect.DeepEqual(got, tt.ids) {
				t.Fatalf("ids %v; want %v", got, tt.ids)
			}
		})
	}
}

func TestOrdinalOf(t *testing.T) {
	p, err := parseDNSPattern("fenced-{0..2}.fenced:7701")
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{"fenced-0": 0, "fenced-2": 2, "fenced-7": 7, "fenced-12": 12} {
		if n, ok := p.ordinalOf(id); !ok || n != want {
			t.Errorf("ordinalOf(%q) = %d, %v; want %d", id, n, ok, want)
		}
	}
	for _, id := range []string{"fenced", "fenced-", "fenced-01", "fenced-x", "other-0", "fenced-0.fenced", "fenced--1"} {
		if n, ok := p.ordinalOf(id); ok {
			t.Errorf("ordinalOf(%q) = %d; want no ordinal", id, n)
		}
	}
}

func TestDiscoveryFlags(t *testing.T) {
	host := func(h string) func() (string, error) { return func() (string, error) { return h, nil } }
	tests := []struct {
		name     string
		o        options
		hostname func() (string, error)
		want     options // id, advertise addresses, join, dev
		err      string
	}{
		{
			name: "id from the host name", o: options{httpAddr: "0.0.0.0:7700"}, hostname: host("fenced-1.fenced.default.svc.cluster.local"),
			want: options{id: "fenced-1", raftAdvertise: "fenced-1.fenced:7701", httpAdvertise: "fenced-1.fenced:7700", join: "fenced-0.fenced:7700,fenced-2.fenced:7700"},
		},
		{
			name: "a node beyond the range joins the names", o: options{id: "fenced-4", httpAddr: ":8080"},
			want: options{id: "fenced-4", raftAdvertise: "fenced-4.fenced:7701", httpAdvertise: "fenced-4.fenced:8080", join: "fenced-0.fenced:8080,fenced-1.fenced:8080,fenced-2.fenced:8080"},
		},
		{
			name: "given advertise addresses are kept", o: options{id: "fenced-0", httpAddr: ":7700", raftAdvertise: "10.0.0.1:7701", httpAdvertise: "10.0.0.1:7700"},
			want: options{id: "fenced-0", raftAdvertise: "10.0.0.1:7701", httpAdvertise: "10.0.0.1:7700", join: "fenced-1.fenced:7700,fenced-2.fenced:7700"},
		},
		{name: "id not of the pattern", o: options{id: "n1", httpAddr: ":7700"}, err: `node id "n1" is not a name`},
		{name: "host name not of the pattern", o: options{httpAddr: ":7700"}, hostname: host("laptop"), err: `node id "laptop"`},
		{name: "no host name", o: options{httpAddr: ":7700"}, hostname: func() (string, error) { return "", errors.New("boom") }, err: "host name is unknown"},
		{name: "with --peers", o: options{id: "fenced-0", httpAddr: ":7700", peers: "a=b:1"}, err: "replaces --peers"},
		{name: "with --join", o: options{id: "fenced-0", httpAddr: ":7700", join: "x:7700"}, err: "replaces --peers"},
		{name: "with --dev", o: options{id: "fenced-0", httpAddr: ":7700", dev: true}, err: "replaces --peers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o
			o.dns.pattern = "fenced-{0..2}.fenced:7701"
			if tt.hostname == nil {
				tt.hostname = host("unused")
			}
			err := o.dns.check(&o, tt.hostname)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v; want one mentioning %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := options{id: o.id, raftAdvertise: o.raftAdvertise, httpAdvertise: o.httpAdvertise, join: o.join, dev: o.dev}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestDiscoveryFlagsThroughParseFlags checks the hook in parseFlags: the
// pattern alone makes a node that joins, not a development server.
func TestDiscoveryFlagsThroughParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--peers-from-dns", "fenced-{0..2}.fenced:7701", "--id", "fenced-2"})
	if err != nil {
		t.Fatal(err)
	}
	if o.dev || o.join == "" || !o.dns.enabled() || o.dns.isFirst() {
		t.Fatalf("dev %v join %q enabled %v first %v; want a joining node that is not first", o.dev, o.join, o.dns.enabled(), o.dns.isFirst())
	}
	one, err := parseFlags([]string{"--peers-from-dns", "solo-{0..0}.x:7701", "--id", "solo-0"})
	if err != nil {
		t.Fatal(err)
	}
	if !one.dev || one.join != "" {
		t.Fatalf("a one-name pattern: dev %v join %q; want a cluster of one", one.dev, one.join)
	}
	if _, err := parseFlags([]string{"--peers-from-dns", "fenced-{0..2}.fenced:7701", "--id", "fenced-0", "--join", "a:1"}); err == nil {
		t.Fatal("--peers-from-dns with --join was accepted")
	}
}

func TestDecide(t *testing.T) {
	const self = "fenced-0"
	fresh := func(n int) peerReport {
		return peerReport{ordinal: n, id: fmt.Sprintf("fenced-%d", n), resolved: true, answered: true}
	}
	with := func(r peerReport, f func(*peerReport)) peerReport { f(&r); return r }
	stateful := func(n int) peerReport { return with(fresh(n), func(r *peerReport) { r.hasState = true }) }
	unresolved := func(n int) peerReport {
		return peerReport{ordinal: n, id: fmt.Sprintf("fenced-%d", n), err: errors.New("no such host")}
	}
	silent := func(n int) peerReport {
		return with(fresh(n), func(r *peerReport) { r.answered, r.err = false, errors.New("connection refused") })
	}
	holdsSelf := with(stateful(1), func(r *peerReport) { r.hasSelf = true })

	tests := []struct {
		name         string
		first        bool
		selfResolved bool
		reports      []peerReport
		want         action
		join         []int
		reason       string
	}{
		{"first, all fresh: bootstrap", true, true, []peerReport{fresh(1), fresh(2)}, actBootstrap, nil, "no peer has state"},
		{"first, a peer unresolved: wait", true, true, []peerReport{fresh(1), unresolved(2)}, actWait, nil, "fenced-2 does not resolve"},
		{"first, a peer silent: wait", true, true, []peerReport{silent(1), fresh(2)}, actWait, nil, "fenced-1 does not answer"},
		{"first, itself unresolved: wait", true, false, []peerReport{fresh(1), fresh(2)}, actWait, nil, "this node"},
		{"first, one peer has state: join it", true, true, []peerReport{fresh(1), stateful(2)}, actJoin, []int{2}, "has a cluster"},
		{"first, a silent peer and one with state: join", true, true, []peerReport{silent(1), stateful(2)}, actJoin, []int{2}, "has a cluster"},
		{"first, replaced while its old member remains: wait", true, true, []peerReport{holdsSelf, stateful(2)}, actWaitRemoval, nil, "remove it first"},
		{"not first, all fresh: wait for the first", false, true, []peerReport{fresh(0), fresh(2)}, actWait, nil, "only the first name"},
		{"not first, nothing resolves: wait", false, false, []peerReport{unresolved(0), unresolved(2)}, actWait, nil, "only the first name"},
		{"not first, the first has state: join", false, true, []peerReport{stateful(0), fresh(2)}, actJoin, []int{0}, "has a cluster"},
		{"not first, two have state: join both", false, true, []peerReport{stateful(0), stateful(2)}, actJoin, []int{0, 2}, "has a cluster"},
		{"not first, old member remains: wait", false, true, []peerReport{stateful(0), holdsSelf}, actWaitRemoval, nil, "remove it first"},
		{"first of a one-name pattern: bootstrap", true, true, nil, actBootstrap, nil, "no peer has state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl := decide(self, tt.first, tt.selfResolved, tt.reports)
			if pl.act != tt.want || !reflect.DeepEqual(pl.join, tt.join) {
				t.Fatalf("decided %v %v (%s); want %v %v", pl.act, pl.join, pl.reason, tt.want, tt.join)
			}
			if !strings.Contains(pl.reason, tt.reason) {
				t.Fatalf("reason %q; want it to mention %q", pl.reason, tt.reason)
			}
		})
	}
}

// fakeResolver resolves the names it holds.
type fakeResolver map[string]bool

func (f fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	if f[host] {
		return []string{"192.0.2.1"}, nil
	}
	return nil, fmt.Errorf("lookup %s: no such host", host)
}

// fakeStatus answers for the endpoints it holds; a nil status is a
// connection error.
type fakeStatus struct {
	mu      sync.Mutex
	answers map[string]*client.Status
	asked   []string
}

func (f *fakeStatus) NodeStatus(_ context.Context, ep string) (*client.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, ep)
	if st := f.answers[ep]; st != nil {
		return st, nil
	}
	return nil, fmt.Errorf("dial %s: connection refused", ep)
}

func testProber(t *testing.T, id string, res fakeResolver, st *fakeStatus) *prober {
	t.Helper()
	o := &options{id: id, httpAddr: ":7700"}
	o.dns.pattern = "fenced-{0..2}.fenced:7701"
	if err := o.dns.check(o, nil); err != nil {
		t.Fatal(err)
	}
	p := &prober{d: &o.dns, selfID: id, resolver: res, status: st, endpoints: map[int]string{}}
	for _, n := range o.dns.names() {
		p.endpoints[n] = fmt.Sprintf("http://fenced-%d.fenced:7700", n)
	}
	return p
}

// TestProberRound checks that one round turns look-ups and status answers
// into the reports decide reads: what has state, what names this node.
func TestProberRound(t *testing.T) {
	all := fakeResolver{"fenced-0.fenced": true, "fenced-1.fenced": true, "fenced-2.fenced": true}
	member := func(ids ...string) *client.Status {
		st := &client.Status{Term: 3, LastIndex: 10}
		for _, id := range ids {
			st.Members = append(st.Members, client.Member{ID: id, Voter: true})
		}
		return st
	}
	tests := []struct {
		name    string
		id      string
		res     fakeResolver
		answers map[string]*client.Status
		want    action
	}{
		{"fresh cluster, first name", "fenced-0", all, map[string]*client.Status{
			"http://fenced-1.fenced:7700": {ID: "fenced-1"}, "http://fenced-2.fenced:7700": {ID: "fenced-2"}}, actBootstrap},
		{"fresh cluster, a name missing", "fenced-0", fakeResolver{"fenced-0.fenced": true, "fenced-1.fenced": true}, map[string]*client.Status{
			"http://fenced-1.fenced:7700": {ID: "fenced-1"}, "http://fenced-2.fenced:7700": {ID: "fenced-2"}}, actWait},
		{"first name lost its volume", "fenced-0", all, map[string]*client.Status{
			"http://fenced-1.fenced:7700": member("fenced-1", "fenced-2"), "http://fenced-2.fenced:7700": member("fenced-1", "fenced-2")}, actJoin},
		{"first name lost its volume, still a member", "fenced-0", all, map[string]*client.Status{
			"http://fenced-1.fenced:7700": member("fenced-0", "fenced-1", "fenced-2")}, actWaitRemoval},
		{"a term alone is state", "fenced-0", all, map[string]*client.Status{
			"http://fenced-1.fenced:7700": {ID: "fenced-1", Term: 1}, "http://fenced-2.fenced:7700": {ID: "fenced-2"}}, actJoin},
		{"second name, first bootstrapped", "fenced-1", all, map[string]*client.Status{
			"http://fenced-0.fenced:7700": member("fenced-0")}, actJoin},
		{"second name, nothing yet", "fenced-1", all, map[string]*client.Status{
			"http://fenced-0.fenced:7700": {ID: "fenced-0"}, "http://fenced-2.fenced:7700": {ID: "fenced-2"}}, actWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &fakeStatus{answers: tt.answers}
			p := testProber(t, tt.id, tt.res, st)
			selfResolved, reports := p.round(context.Background())
			pl := decide(tt.id, p.d.isFirst(), selfResolved, reports)
			if pl.act != tt.want {
				t.Fatalf("decided %v (%s); want %v; reports %v", pl.act, pl.reason, tt.want, summarize(reports))
			}
			for _, ep := range st.asked {
				if strings.Contains(ep, tt.id+".") {
					t.Fatalf("the node asked itself (%s)", ep)
				}
			}
		})
	}
}

// scripted is a resolver and a status source whose answers change from one
// round of discovery to the next: the look-up of the node's own name, once
// per round, runs the next step.
type scripted struct {
	mu      sync.Mutex
	self    string
	res     fakeResolver
	st      *fakeStatus
	steps   []func(*scripted)
	rounds  int
	onRound func(int)
}

func (s *scripted) LookupHost(ctx context.Context, host string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if host == s.self {
		if s.rounds < len(s.steps) {
			s.steps[s.rounds](s)
		}
		s.rounds++
		if s.onRound != nil {
			s.onRound(s.rounds)
		}
	}
	return s.res.LookupHost(ctx, host)
}

func (s *scripted) NodeStatus(ctx context.Context, ep string) (*client.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.NodeStatus(ctx, ep)
}

// TestAwaitWaitsUntilTheFirstBootstraps plays a second name through the
// rounds: nothing resolves, then the first name answers without state, then
// with a cluster; it joins through the first name only then.
func TestAwaitWaitsUntilTheFirstBootstraps(t *testing.T) {
	s := &scripted{self: "fenced-1.fenced", res: fakeResolver{}, st: &fakeStatus{answers: map[string]*client.Status{}}}
	s.steps = []func(*scripted){
		func(s *scripted) {},
		func(s *scripted) {
			s.res["fenced-0.fenced"], s.res["fenced-1.fenced"], s.res["fenced-2.fenced"] = true, true, true
		},
		func(s *scripted) { s.st.answers["http://fenced-0.fenced:7700"] = &client.Status{ID: "fenced-0"} },
		func(s *scripted) {
			s.st.answers["http://fenced-0.fenced:7700"] = &client.Status{ID: "fenced-0", Term: 2, Members: []client.Member{{ID: "fenced-0"}}}
		},
	}
	p := testProber(t, "fenced-1", nil, nil)
	p.resolver, p.status = s, s
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pl, err := p.await(ctx, hclog.NewNullLogger(), time.Millisecond, nil, actJoin)
	if err != nil {
		t.Fatal(err)
	}
	if pl.act != actJoin || !reflect.DeepEqual(pl.join, []int{0}) {
		t.Fatalf("plan %+v; want join through 0", pl)
	}
	if s.rounds < len(s.steps) {
		t.Fatalf("joined after %d rounds; the first name had a cluster only after %d", s.rounds, len(s.steps))
	}
}

// TestAwaitNeverBootstrapsAUsedDataDir: a node that may only join (its data
// dir was used) keeps waiting where a new first name would bootstrap.
func TestAwaitNeverBootstrapsAUsedDataDir(t *testing.T) {
	s := &scripted{
		self: "fenced-0.fenced",
		res:  fakeResolver{"fenced-0.fenced": true, "fenced-1.fenced": true, "fenced-2.fenced": true},
		st: &fakeStatus{answers: map[string]*client.Status{
			"http://fenced-1.fenced:7700": {ID: "fenced-1"}, "http://fenced-2.fenced:7700": {ID: "fenced-2"}}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.onRound = func(n int) {
		if n > 20 {
			cancel()
		}
	}
	p := testProber(t, "fenced-0", nil, nil)
	p.resolver, p.status = s, s
	if pl, err := p.await(ctx, hclog.NewNullLogger(), time.Millisecond, nil, actJoin); !errors.Is(err, context.Canceled) {
		t.Fatalf("await returned %+v, %v; want it to wait until cancelled", pl, err)
	}
	// The same rounds, for a first name that may bootstrap, do.
	s.rounds = 0
	pl, err := p.await(context.Background(), hclog.NewNullLogger(), time.Millisecond, nil, actBootstrap, actJoin)
	if err != nil || pl.act != actBootstrap {
		t.Fatalf("await returned %+v, %v; want bootstrap", pl, err)
	}
}

// TestAwaitStopsWhenSettled: a node that receives state while it waits (the
// leader took it in) stops waiting at once.
func TestAwaitStopsWhenSettled(t *testing.T) {
	res := fakeResolver{"fenced-0.fenced": true, "fenced-1.fenced": true, "fenced-2.fenced": true}
	p := testProber(t, "fenced-1", res, &fakeStatus{})
	rounds := 0
	settled := func() bool { rounds++; return rounds > 3 }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.await(ctx, hclog.NewNullLogger(), time.Millisecond, settled, actJoin); err != nil {
		t.Fatalf("await: %v; want it to return once settled", err)
	}
}
