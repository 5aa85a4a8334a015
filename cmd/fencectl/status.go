package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/fenced/fenced/client"
)

var statusCommand = command{
	name:    "status",
	summary: "show members, leader, term, commit and applied index, and each node's health",
	help: `
Shows the cluster as its members see it. fencectl asks the first endpoint that
answers for the member list, then asks every member, at its own HTTP address,
for its view (GET /v1/cluster) and its readiness (GET /readyz). A member that
does not answer is shown as unreachable; one that answers but knows no leader
as not ready.

The exit code is 0 when a member answers that it is the ready leader, 1 when
no node is reachable or no leader answers.

--wait DURATION first waits up to DURATION for a member to answer that it is
the ready leader (elected and serving), asking every endpoint about every
100ms: for scripts that start a cluster and go on once it serves. A node
that is down or frozen is asked again; the wait ends with exit 1, naming what
each endpoint said, when DURATION passes first. While it waits, a line on
stderr every 5s says so, when stderr is a terminal or with --progress (never
with -o json).`,
	examples: `
fencectl status
fencectl status --wait 30s
fencectl status --endpoints 10.0.0.1:7700,10.0.0.2:7700
fencectl status -o json | jq '.members[] | select(.health != "ready")'`,
	new: func() runner { return &statusCmd{} },
}

type statusCmd struct {
	wait     time.Duration
	progress progressMode
}

func (s *statusCmd) flags(fs *pflag.FlagSet) {
	fs.DurationVar(&s.wait, "wait", 0, "wait up to this long for a ready leader before showing the status")
	progressFlag(fs, &s.progress)
}

// memberHealth is one member as fencectl status reports it.
type memberHealth struct {
	ID       string         `json:"id"`
	HTTPAddr string         `json:"http_addr"`
	RaftAddr string         `json:"raft_addr"`
	Voter    bool           `json:"voter"`
	Leader   bool           `json:"leader"`
	Health   string         `json:"health"` // ready, not_ready, unreachable
	Error    string         `json:"error,omitempty"`
	Status   *client.Status `json:"status,omitempty"`
	// CredentialsStale is set when the member's last credentials reload
	// failed, or it uses other tokens than a member that loaded its own
	// later: a revoked token may still work there. CredentialsNote says why.
	CredentialsStale bool   `json:"credentials_stale,omitempty"`
	CredentialsNote  string `json:"credentials_note,omitempty"`
}

// clusterHealth is the JSON document of fencectl status.
type clusterHealth struct {
	Leader     string         `json:"leader"`
	LeaderHTTP string         `json:"leader_http,omitempty"`
	Term       uint64         `json:"term"`
	Members    []memberHealth `json:"members"`
}

// Health values of a member.
const (
	healthReady       = "ready"
	healthNotReady    = "not_ready"
	healthUnreachable = "unreachable"
)

// fetchHealth asks the cluster, through c, for its members, then probes each
// of them.
func fetchHealth(ctx context.Context, e *env, c *client.Client) (clusterHealth, error) {
	first, err := c.Status(ctx)
	if err != nil {
		return clusterHealth{}, explain(err, subject{}, e)
	}
	// Half the timeout for the probes: a member that hangs is shown as
	// unreachable while the command still ends within --timeout.
	pctx, pcancel := context.WithTimeout(ctx, e.g.timeout/2)
	defer pcancel()
	return gatherHealth(pctx, c, schemeOf(c.Endpoints()), first), nil
}

func (s *statusCmd) run(ctx context.Context, e *env, args []string) error {
	if len(args) != 0 {
		return usageErr("status", "status takes no arguments")
	}
	if s.wait < 0 {
		return usageErr("status", "--wait must not be negative")
	}
	c := e.client()
	if s.wait > 0 {
		c = e.waitingClient()
		wctx, wcancel := context.WithTimeout(ctx, s.wait)
		stop := e.startProgress(e.progressWanted(s.progress), func(waited time.Duration) string {
			return fmt.Sprintf("waiting for a ready leader: %v of --wait %v", waited, s.wait)
		})
		_, err := c.WaitReady(wctx)
		stop()
		wcancel()
		if err != nil {
			return fmt.Errorf("no ready leader within --wait %v: %w", s.wait, err)
		}
	}
	ctx, cancel := e.withTimeout(ctx, 0)
	defer cancel()
	h, err := fetchHealth(ctx, e, c)
	if err != nil {
		return err
	}
	if e.jsonOutput() {
		if err := printJSON(e.stdout, h); err != nil {
			return err
		}
	} else if err := printHealth(e, h); err != nil {
		return err
	}
	if h.Leader == "" {
		return errors.New("the cluster has no leader: no member answered that it is the ready leader")
	}
	return nil
}

// gatherHealth asks every member, in parallel, for its status and readiness.
// The leader is the member that answers itself that it is the ready leader:
// a leader another node merely remembers may be gone.
func gatherHealth(ctx context.Context, c *client.Client, scheme string, first *client.Status) clusterHealth {
	h := clusterHealth{Term: first.Term}
	h.Members = make([]memberHealth, len(first.Members))
	known := endpointIDs(ctx, c, first.Members)
	var wg sync.WaitGroup
	for i, m := range first.Members {
		h.Members[i] = memberHealth{ID: m.ID, HTTPAddr: m.HTTPAddr, RaftAddr: m.RaftAddr, Voter: m.Voter, Leader: m.Leader}
		// A given endpoint that answers as the member is reachable from
		// here; the address the member advertises may only resolve inside
		// the cluster's own network (containers, NAT).
		endpoint := known[m.ID]
		if endpoint == "" && m.HTTPAddr != "" {
			endpoint = scheme + "://" + m.HTTPAddr
		}
		if endpoint == "" {
			h.Members[i].Health, h.Members[i].Error = healthUnreachable, "its HTTP address is not known yet"
			continue
		}
		wg.Add(1)
		go func(mh *memberHealth) {
			defer wg.Done()
			probe(ctx, c, endpoint, mh)
		}(&h.Members[i])
	}
	wg.Wait()
	for _, m := range h.Members {
		if m.Status != nil && m.Status.Term > h.Term {
			h.Term = m.Status.Term
		}
		if m.Status != nil && m.Status.LeaderID == m.ID && m.Status.Ready {
			h.Leader, h.LeaderHTTP = m.ID, m.HTTPAddr
		}
	}
	markStaleCredentials(h.Members)
	markMixedAuth(h.Members)
	return h
}

// markStaleCredentials flags the members whose credentials are older than
// the others': their latest reload failed, or their tokens differ from
// those of the member that loaded its credentials last.
func markStaleCredentials(ms []memberHealth) {
	var newest *client.CredentialStatus
	var newestID string
	for _, m := range ms {
		if c := credentialsOf(m); c != nil && (newest == nil || c.LoadedAt.After(newest.LoadedAt)) {
			newest, newestID = c, m.ID
		}
	}
	for i := range ms {
		c := credentialsOf(ms[i])
		switch {
		case c == nil:
		case c.ReloadError != "":
			ms[i].CredentialsStale = true
			ms[i].CredentialsNote = "its latest reload failed, it still uses its older credentials: " + c.ReloadError
		case c.TokensDigest != newest.TokensDigest && c.LoadedAt.Before(newest.LoadedAt):
			ms[i].CredentialsStale = true
			ms[i].CredentialsNote = fmt.Sprintf("its tokens (%s, loaded %s) differ from those %s loaded later (%s, %s); send it SIGHUP",
				c.TokensDigest, c.LoadedAt.Format(time.RFC3339), newestID, newest.TokensDigest, newest.LoadedAt.Format(time.RFC3339))
		case c.ACLDigest != newest.ACLDigest && c.LoadedAt.Before(newest.LoadedAt):
			ms[i].CredentialsStale = true
			ms[i].CredentialsNote = fmt.Sprintf("its key ACL (%s, loaded %s) differs from the one %s loaded later (%s, %s): the same request is judged differently on each; send it SIGHUP",
				orNone(c.ACLDigest), c.LoadedAt.Format(time.RFC3339), newestID, orNone(newest.ACLDigest), newest.LoadedAt.Format(time.RFC3339))
		}
	}
}

// markMixedAuth flags the members whose authentication setting is not the
// one most members have (on, in a tie): a forward from a node with it off
// is refused by a node with it on, and the two judge clients differently.
func markMixedAuth(ms []memberHealth) {
	n := map[string]int{}
	for _, m := range ms {
		if m.Status != nil && m.Status.Auth != "" {
			n[m.Status.Auth]++
		}
	}
	if len(n) < 2 {
		return
	}
	most := "on"
	if n["off"] > n["on"] {
		most = "off"
	}
	for i, m := range ms {
		if m.Status != nil && m.Status.Auth != "" && m.Status.Auth != most {
			ms[i].CredentialsStale = true
			ms[i].CredentialsNote = fmt.Sprintf("its authentication is %s while %d other members' is %s: give every node the same --auth-tokens/--tls-ca", m.Status.Auth, n[most], most)
		}
	}
}

// orNone names a missing file's digest.
func orNone(digest string) string {
	if digest == "" {
		return "none"
	}
	return digest
}

func credentialsOf(m memberHealth) *client.CredentialStatus {
	if m.Status == nil {
		return nil
	}
	return m.Status.Credentials
}

// endpointIDs maps member ids to the given endpoints that answer as them.
// They are preferred to the addresses members advertise, which may not be
// reachable from where fencectl runs, and they cover members whose address
// the cluster has not recorded yet.
func endpointIDs(ctx context.Context, c *client.Client, members []client.Member) map[string]string {
	out := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, ep := range c.Endpoints() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, c.AttemptTimeout())
			defer cancel()
			if st, err := c.NodeStatus(pctx, ep); err == nil {
				mu.Lock()
				out[st.ID] = ep
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// probe asks one member for its status and readiness, each question bounded
// by the client's attempt timeout: a frozen member is shown as unreachable
// without holding up the others.
func probe(ctx context.Context, c *client.Client, endpoint string, mh *memberHealth) {
	ctx, cancel := context.WithTimeout(ctx, 2*c.AttemptTimeout())
	defer cancel()
	sctx, scancel := context.WithTimeout(ctx, c.AttemptTimeout())
	st, err := c.NodeStatus(sctx, endpoint)
	scancel()
	if errors.Is(err, context.DeadlineExceeded) {
		mh.Health, mh.Error = healthUnreachable, fmt.Sprintf("no answer within %v", c.AttemptTimeout())
		return
	}
	if err != nil {
		mh.Health, mh.Error = healthUnreachable, oneLine(err.Error())
		return
	}
	mh.Status = st
	if err := c.NodeReady(ctx, endpoint); err != nil {
		mh.Health, mh.Error = healthNotReady, oneLine(err.Error())
		return
	}
	mh.Health = healthReady
}

// schemeOf returns the URL scheme of the endpoints, so members are reached
// the same way (http or https) as the endpoints given.
func schemeOf(endpoints []string) string {
	for _, ep := range endpoints {
		if u, err := url.Parse(ep); err == nil && u.Scheme != "" {
			return u.Scheme
		}
	}
	return "http"
}

func printHealth(e *env, h clusterHealth) error {
	ready := 0
	for _, m := range h.Members {
		if m.Health == healthReady {
			ready++
		}
	}
	leader := h.Leader
	if leader == "" {
		leader = "none"
	}
	fmt.Fprintf(e.stdout, "leader: %s  term: %d  members: %d (%d ready)\n\n", leader, h.Term, len(h.Members), ready)
	t := newTable(e.stdout, "ID", "HTTP", "RAFT", "ROLE", "VOTER", "TERM", "COMMIT", "APPLIED", "KEYS", "DATA DIR", "HEALTH")
	for _, m := range h.Members {
		role, term, commit, applied, keys, disk := "", "", "", "", "", ""
		if st := m.Status; st != nil {
			role = st.State
			term, commit = strconv.FormatUint(st.Term, 10), strconv.FormatUint(st.CommitIndex, 10)
			applied, keys = strconv.FormatUint(st.AppliedIndex, 10), strconv.Itoa(st.Keys)
			disk = dataDirCell(st.DataDir)
		}
		health := m.Health
		if m.Error != "" {
			health += ": " + m.Error
		}
		t.row(m.ID, m.HTTPAddr, m.RaftAddr, role, yesNo(m.Voter), term, commit, applied, keys, disk, health)
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, m := range h.Members {
		if m.Status != nil && m.Status.DataDir != nil && m.Status.DataDir.NoSpace {
			fmt.Fprintf(e.stdout, "\nwarning: %s has no space: %s; as leader it refuses new keys until space is freed in its data dir (%s)\n",
				m.ID, m.Status.DataDir.Reason, m.Status.DataDir.Path)
		}
	}
	for _, m := range h.Members {
		if m.CredentialsStale {
			fmt.Fprintf(e.stdout, "\nwarning: %s's credentials are older than the others': %s\n", m.ID, m.CredentialsNote)
		}
	}
	return nil
}

// dataDirCell shows a member's data dir use: its size and the free space of
// its file system, or NO SPACE while it refuses new keys.
func dataDirCell(d *client.DataDirStatus) string {
	if d == nil {
		return ""
	}
	cell := fmt.Sprintf("%s used", byteSize(d.UsedBytes))
	if d.TotalBytes > 0 {
		cell += fmt.Sprintf(", %s free (%.0f%%)", byteSize(d.FreeBytes), 100*float64(d.FreeBytes)/float64(d.TotalBytes))
	}
	if d.NoSpace {
		cell = "NO SPACE: " + cell
	}
	return cell
}

// byteSize writes a byte count in binary units.
func byteSize(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%dB", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(b)/float64(div), "KMGTPE"[exp])
}
