package docker

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/testutil"
	"github.com/fenced/fenced/jepsen-like/backend"
)

// dnsNames are the services of docker-compose.dns.yml: the first three form
// the cluster, the last two come with the scale profile.
var dnsNames = []string{"fenced-0", "fenced-1", "fenced-2", "fenced-3", "fenced-4"}

// newDNSProject prepares docker-compose.dns.yml (three nodes that find each
// other by DNS) under a fresh project name and host ports, and takes it down
// with every volume, the scale profile's included, when the test ends.
func newDNSProject(t *testing.T) *project {
	t.Helper()
	requireDocker(t)
	img := buildImage(t)
	p := &project{
		t:          t,
		name:       backend.ProjectName("fenceddns-"),
		files:      []string{filepath.Join(root, "docker-compose.dns.yml")},
		services:   dnsNames[:3],
		containers: map[string]string{},
		env:        []string{"FENCED_IMAGE=" + img},
		http:       map[string]string{},
	}
	for i, addr := range testutil.FreeAddrs(t, len(dnsNames)) {
		_, port, _ := net.SplitHostPort(addr)
		p.http[dnsNames[i]] = addr
		p.env = append(p.env, fmt.Sprintf("FENCED_%d_PORT=%s", i, port))
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := p.composeOutput("--profile", "scale", "logs", "--no-color", "--tail", "80")
			t.Logf("logs of compose project %s:\n%s", p.name, out)
		}
		if out, err := p.composeOutput("--profile", "scale", "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Errorf("docker-compose down -v: %v\n%s", err, out)
		}
	})
	return p
}

// waitMembers waits until every service in svcs answers, all name the same
// ready leader among them in the same term, and the leader's configuration
// is exactly svcs, each with its HTTP address. It returns the leader's view.
func (p *project) waitMembers(ctx context.Context, svcs []string, timeout time.Duration) *client.Status {
	p.t.Helper()
	want := slices.Clone(svcs)
	sort.Strings(want)
	var leader *client.Status
	testutil.Eventually(p.t, timeout, func() error {
		views, err := p.statuses(ctx, svcs)
		if err != nil {
			return err
		}
		ls, ok := views[views[svcs[0]].LeaderID]
		if !ok {
			return fmt.Errorf("%s names leader %q, not one of %v", svcs[0], views[svcs[0]].LeaderID, svcs)
		}
		if !ls.Ready || ls.LeaderID != ls.ID {
			return fmt.Errorf("%s is not a ready leader", ls.ID)
		}
		var got []string
		for _, m := range ls.Members {
			if m.HTTPAddr == "" || !m.Voter {
				return fmt.Errorf("member %s: voter %v, HTTP address %q", m.ID, m.Voter, m.HTTPAddr)
			}
			got = append(got, m.ID)
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("members %v, want %v", got, want)
		}
		for s, st := range views {
			if st.LeaderID != ls.ID || st.Term != ls.Term || st.ClusterID != ls.ClusterID {
				return fmt.Errorf("%s sees leader %q term %d cluster %q; the leader: %q term %d cluster %q",
					s, st.LeaderID, st.Term, st.ClusterID, ls.ID, ls.Term, ls.ClusterID)
			}
			if st.AppliedIndex < ls.CommitIndex-min(ls.CommitIndex, 1) {
				return fmt.Errorf("%s applied %d, the leader committed %d", s, st.AppliedIndex, ls.CommitIndex)
			}
		}
		leader = ls
		return nil
	})
	return leader
}

// logsOf returns the output of a service's container.
func (p *project) logsOf(svc string) string {
	out, _ := p.composeOutput("--profile", "scale", "logs", "--no-color", svc)
	return out
}

// TestComposeDNSDiscovery runs a cluster that no one gave a peer list:
// fenced-0 started alone waits; it bootstraps the cluster once every name
// resolves and answers without state, and the others join; it grows
// to five nodes and back to three; then a node replaced by a container on an
// empty volume waits while its old member is still in the configuration, and
// joins as a new member once the operator removed the old one, fenced-0
// (the one name that may bootstrap) included: it joins the cluster, never
// starts another. Tokens keep growing through all of it.
func TestComposeDNSDiscovery(t *testing.T) {
	p := newDNSProject(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// fenced-0 alone cannot prove that no other node has state: it waits,
	// serving nothing, and says which names it misses.
	p.compose("up", "-d", "fenced-0")
	testutil.Eventually(t, 2*time.Minute, func() error {
		if logs := p.logsOf("fenced-0"); !strings.Contains(logs, "fenced-1 does not resolve") {
			return fmt.Errorf("fenced-0 does not say yet that fenced-1 does not resolve")
		}
		return nil
	})
	if st, err := p.status(ctx, "fenced-0"); err == nil {
		t.Fatalf("fenced-0 serves before it heard from its peers: %+v", st)
	}
	if logs := p.logsOf("fenced-0"); strings.Contains(logs, "bootstrapping a new cluster") {
		t.Fatalf("fenced-0 bootstrapped alone:\n%s", logs)
	}
	p.started = time.Now()
	p.compose("up", "-d")

	three := dnsNames[:3]
	lead := p.waitMembers(ctx, three, 2*time.Minute)
	t.Logf("three nodes found each other %v after up; leader %s, cluster %s", time.Since(p.started).Round(10*time.Millisecond), lead.ID, lead.ClusterID)
	// Only fenced-0 bootstrapped; the others joined its cluster.
	if logs := p.logsOf("fenced-0"); !strings.Contains(logs, "bootstrapping a new cluster") {
		t.Fatalf("fenced-0 did not bootstrap:\n%s", logs)
	}
	for _, s := range three[1:] {
		if logs := p.logsOf(s); strings.Contains(logs, "bootstrapping a new cluster") || !strings.Contains(logs, "announced to the cluster") {
			t.Fatalf("%s bootstrapped, or never joined:\n%s", s, logs)
		}
	}

	cl := p.client(three...)
	last := acquireRelease(ctx, t, cl, 0)

	// The preStop hook of the Kubernetes manifests, run in the image: a
	// follower has nothing to hand over; the leader hands leadership over.
	for _, s := range three {
		if s != lead.ID {
			if out := p.docker("exec", p.container(s), "/fenced", "step-down"); !strings.Contains(out, "does not lead") {
				t.Fatalf("step-down on follower %s: %s", s, out)
			}
		}
	}
	if out := p.docker("exec", p.container(lead.ID), "/fenced", "step-down"); !strings.Contains(out, "handed leadership to") {
		t.Fatalf("step-down on leader %s: %s", lead.ID, out)
	}
	old := lead.ID
	testutil.Eventually(t, time.Minute, func() error {
		st, err := p.status(ctx, old)
		if err != nil || st.LeaderID == "" || st.LeaderID == old {
			return fmt.Errorf("%s still sees leader %+v (%v)", old, st, err)
		}
		return nil
	})
	lead = p.waitMembers(ctx, three, time.Minute)
	t.Logf("step-down on %s handed leadership to %s", old, lead.ID)

	// Scale up: the new names lie beyond the pattern; they join.
	p.compose("--profile", "scale", "up", "-d", "fenced-3", "fenced-4")
	five := dnsNames
	lead = p.waitMembers(ctx, five, 2*time.Minute)
	t.Logf("scaled up to five; leader %s", lead.ID)
	last = acquireRelease(ctx, t, p.client(five...), last)

	// Scale down: the operator removes the members, then their containers
	// and volumes.
	for _, id := range []string{"fenced-4", "fenced-3"} {
		if err := cl.Remove(ctx, id); err != nil {
			t.Fatalf("remove %s: %v", id, err)
		}
	}
	p.compose("--profile", "scale", "rm", "-s", "-f", "fenced-3", "fenced-4")
	p.docker("volume", "rm", p.name+"_fenced-3", p.name+"_fenced-4")
	lead = p.waitMembers(ctx, three, 2*time.Minute)
	t.Logf("scaled down to three; leader %s", lead.ID)
	last = acquireRelease(ctx, t, cl, last)

	// Replace fenced-1 with a container on an empty volume. While its old
	// member is in the configuration, the new one must not join under the
	// old identity: it waits and says why.
	victim := "fenced-1"
	if lead.ID == victim {
		victim = "fenced-2"
	}
	p.compose("rm", "-s", "-f", victim)
	p.docker("volume", "rm", p.name+"_"+victim)
	p.compose("up", "-d", victim)
	testutil.Eventually(t, 2*time.Minute, func() error {
		if !strings.Contains(p.logsOf(victim), "remove it first") {
			return fmt.Errorf("%s does not say yet that it waits for its old member's removal", victim)
		}
		return nil
	})
	// It has not even started Raft, so the leader cannot mistake it for
	// the old member and catch it up as if it had kept its log and votes.
	if st, err := p.status(ctx, victim); err == nil {
		t.Fatalf("the replacement %s serves while its old member is still in the configuration: %+v", victim, st)
	}
	others := slices.DeleteFunc(slices.Clone(three), func(s string) bool { return s == victim })
	if err := p.client(others...).Remove(ctx, victim); err != nil {
		t.Fatalf("remove the old %s: %v", victim, err)
	}
	lead = p.waitMembers(ctx, three, 2*time.Minute)
	t.Logf("%s rejoined on an empty volume as a new member; leader %s", victim, lead.ID)
	// The replacement serves, through itself, a grant made after it joined,
	// and tokens kept growing.
	last = acquireRelease(ctx, t, p.client(victim), last)
	if v, err := p.client(victim).Verify(ctx, "dns", fmt.Sprint(last), ""); err != nil || v.Allow || v.Reason == "" {
		t.Fatalf("verify of a released grant through the replacement: %+v %v", v, err)
	}

	// Replace fenced-0, the one name that may bootstrap, with an empty
	// volume: it finds the others' cluster and joins it as a new member; it
	// never starts a second cluster.
	cluster := lead.ClusterID
	p.compose("rm", "-s", "-f", "fenced-0")
	p.docker("volume", "rm", p.name+"_fenced-0")
	rest := dnsNames[1:3]
	p.waitMembersOf(ctx, rest, three, 2*time.Minute)
	p.compose("up", "-d", "fenced-0")
	testutil.Eventually(t, 2*time.Minute, func() error {
		if !strings.Contains(p.logsOf("fenced-0"), "remove it first") {
			return fmt.Errorf("fenced-0 does not say yet that it waits for its old member's removal")
		}
		return nil
	})
	if err := p.client(rest...).Remove(ctx, "fenced-0"); err != nil {
		t.Fatalf("remove the old fenced-0: %v", err)
	}
	lead = p.waitMembers(ctx, three, 2*time.Minute)
	if lead.ClusterID != cluster {
		t.Fatalf("the cluster is %s after fenced-0 was replaced; it was %s", lead.ClusterID, cluster)
	}
	if logs := p.logsOf("fenced-0"); strings.Contains(logs, "bootstrapping a new cluster") {
		t.Fatalf("the replaced fenced-0 bootstrapped:\n%s", logs)
	}
	t.Logf("fenced-0 rejoined on an empty volume as a new member of cluster %s; leader %s", cluster, lead.ID)
	acquireRelease(ctx, t, p.client("fenced-0"), last)
}

// waitMembersOf waits until the services in svcs agree on a ready leader
// among them whose configuration is exactly members (some of which may be
// down).
func (p *project) waitMembersOf(ctx context.Context, svcs, members []string, timeout time.Duration) {
	p.t.Helper()
	testutil.Eventually(p.t, timeout, func() error {
		st, err := p.status(ctx, svcs[0])
		if err != nil {
			return err
		}
		if !slices.Contains(svcs, st.LeaderID) {
			return fmt.Errorf("%s names leader %q, not one of %v", svcs[0], st.LeaderID, svcs)
		}
		ls, err := p.status(ctx, st.LeaderID)
		if err != nil {
			return err
		}
		if !ls.Ready || ls.LeaderID != ls.ID || len(ls.Members) != len(members) {
			return fmt.Errorf("%s: ready %v, leader %q, members %v", ls.ID, ls.Ready, ls.LeaderID, ls.Members)
		}
		return nil
	})
}

// acquireRelease takes and gives back the key "dns", checks that its token
// is above after, and returns it.
func acquireRelease(ctx context.Context, t *testing.T, cl *client.Client, after uint64) uint64 {
	t.Helper()
	g, err := cl.Acquire(ctx, client.AcquireRequest{Key: "dns", Holder: "h", TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if uint64(g.Token) <= after {
		t.Fatalf("token %d is not above %d", uint64(g.Token), after)
	}
	if _, err := cl.Release(ctx, client.ReleaseRequest{Key: "dns", Holder: "h", Token: g.Token}); err != nil {
		t.Fatal(err)
	}
	return uint64(g.Token)
}
