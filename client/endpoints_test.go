package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/fence"
)

// hangingEndpoint is a listener that never accepts: the kernel completes the
// handshake and queues the request, as it does for a process frozen by
// SIGSTOP, and no answer ever comes.
func hangingEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return "http://" + ln.Addr().String()
}

// refusedEndpoint is an address nothing listens on.
func refusedEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// fakeNode answers like a ready leader and records the acquires it served.
type fakeNode struct {
	srv *httptest.Server
	mu  sync.Mutex
	ids []string
}

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	f := &fakeNode{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, Status{ID: "n2", State: "Leader", Ready: true, LeaderID: "n2"})
	})
	mux.HandleFunc("POST /v1/acquire", func(w http.ResponseWriter, r *http.Request) {
		var req AcquireRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.ids = append(f.ids, req.RequestID)
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, Grant{Key: req.Key, Holder: req.Holder, Token: fence.Token(1<<32 | 1), Epoch: 1, Seq: 1, TTL: "10s"})
	})
	mux.HandleFunc("GET /v1/keys/{key}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, KeyInfo{Key: r.PathValue("key"), Holder: "h", Token: fence.Token(1<<32 | 1), State: "held"})
	})
	mux.HandleFunc("POST /v1/verify", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, VerifyResponse{Allow: true, Reason: "current"})
	})
	mux.HandleFunc("POST /v1/renew", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, RenewResponse{Key: "k", Holder: "h", Token: fence.Token(1<<32 | 1), TTL: "10s"})
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeNode) requestIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...)
}

// notMemberEndpoint answers every request as a node that is not a member.
func notMemberEndpoint(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusServiceUnavailable, "not_member", "this node is not a member of the cluster")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// runOp runs one of the requests the endpoint tests send, by name (status,
// key, verify, acquire, renew), against a fakeNode's key k held by h; a
// verify the node refuses is an error.
func runOp(ctx context.Context, c *Client, op string) error {
	var err error
	switch op {
	case "status":
		_, err = c.Status(ctx)
	case "key":
		_, err = c.Key(ctx, "k")
	case "verify":
		var v VerifyResponse
		v, err = c.Verify(ctx, "k", "4294967297", "")
		if err == nil && !v.Allow {
			err = errors.New("refused: " + v.Reason)
		}
	case "acquire":
		_, err = c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h", RequestID: "rid-1"})
	case "renew":
		_, err = c.Renew(ctx, "k", "h", fence.Token(1<<32|1))
	default:
		err = fmt.Errorf("no request %q", op)
	}
	return err
}

// TestFrozenFirstEndpointIsLeftForTheNext: a node that never answers, listed
// first, does not keep reads, verifies or writes from the healthy node next
// to it, well within the caller's deadline.
func TestFrozenFirstEndpointIsLeftForTheNext(t *testing.T) {
	good := newFakeNode(t)
	for _, op := range []string{"status", "key", "verify", "acquire", "renew"} {
		t.Run(op, func(t *testing.T) {
			c := New([]string{hangingEndpoint(t), good.srv.URL})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := runOp(ctx, c, op); err != nil {
				t.Fatalf("%s with a frozen first endpoint: %v", op, err)
			}
		})
	}
	// Every acquire the healthy node served carried the caller's request id.
	for _, id := range good.requestIDs() {
		if id != "rid-1" {
			t.Fatalf("acquire reached the healthy node with request id %q, want rid-1", id)
		}
	}
}

// TestHedgedReadLeavesItsFirstAttempt: a read's first attempt runs in the
// caller's goroutine, so the hedge that serves it must take over the call and
// end that attempt; the read is then served long before the first attempt's
// own deadline, whether the hedge itself is served or moves on to a third
// node; the frozen node is asked once.
func TestHedgedReadLeavesItsFirstAttempt(t *testing.T) {
	good := newFakeNode(t)
	for _, op := range []string{"status", "key", "verify"} {
		for _, via := range []string{"next", "third"} {
			t.Run(op+"/"+via, func(t *testing.T) {
				frozen, conns := countingFrozenEndpoint(t)
				eps := []string{frozen, good.srv.URL}
				if via == "third" {
					eps = []string{frozen, notMemberEndpoint(t), good.srv.URL}
				}
				// The first attempt's own deadline is far beyond the test's
				// bound: only the hedge's taking over ends the call early.
				c := New(eps, WithAttemptTimeout(time.Minute), WithHedgeDelay(20*time.Millisecond))
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				start := time.Now()
				if err := runOp(ctx, c, op); err != nil {
					t.Fatalf("%s: %v", op, err)
				}
				if took := time.Since(start); took > 20*time.Second {
					t.Fatalf("%s took %v: the hedge waited for the frozen first attempt", op, took)
				}
				if conns() != 1 {
					t.Fatalf("%d connections to the frozen node, want the first attempt's one", conns())
				}
			})
		}
	}
}

// TestFailedEndpointsAreEachNamed: connection refused, a TLS handshake
// against plain HTTP and a node that is not a member are failures the client
// moves past at once; when every endpoint failed, the error names each
// endpoint and why, not just "context deadline exceeded".
func TestFailedEndpointsAreEachNamed(t *testing.T) {
	plain := newFakeNode(t)
	refused := refusedEndpoint(t)
	tlsMismatch := strings.Replace(plain.srv.URL, "http://", "https://", 1)
	notMember := notMemberEndpoint(t)
	c := New([]string{refused, tlsMismatch, notMember})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := c.Status(ctx)
	if err == nil {
		t.Fatal("status succeeded with no usable endpoint")
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v is not ErrUnavailable", err)
	}
	msg := err.Error()
	for _, want := range []string{refused + ": connection refused", tlsMismatch + ": TLS", notMember + ": not a member"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("error %q does not contain %q", msg, want)
		}
	}
}

// TestUnusableEndpointsFailAtOnce: when no endpoint can ever be used as
// configured (https against plain HTTP, a bad address), the client says so
// without waiting out the caller's deadline. (A refused connection is
// retried: a node that is starting refuses connections for a moment.)
func TestUnusableEndpointsFailAtOnce(t *testing.T) {
	plain := newFakeNode(t)
	tlsMismatch := strings.Replace(plain.srv.URL, "http://", "https://", 1)
	c := New([]string{tlsMismatch, "ftp://127.0.0.1:1", "127.0.0.1:99999", "127.0.0.1"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.Key(ctx, "k")
	if err == nil || ctx.Err() != nil {
		t.Fatalf("key with unusable endpoints: %v (caller's context: %v)", err, ctx.Err())
	}
	for _, want := range []string{"TLS", "scheme", "99999", "no port"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not contain %q", err, want)
		}
	}
}

// TestParseEndpoints: endpoints are checked before any network call.
func TestParseEndpoints(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7700":      "http://127.0.0.1:7700",
		"https://node1:7700/": "https://node1:7700",
		"http://[::1]:7700":   "http://[::1]:7700",
		" localhost:1 ":       "http://localhost:1",
	} {
		got, err := ParseEndpoint(in)
		if err != nil || got != want {
			t.Errorf("ParseEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"ftp://a:1", "a:99999", "a:0", "a", "http://a", "http://a:1/v1", "http://u:p@a:1", "a:port", "https://:7700"} {
		if _, err := ParseEndpoint(bad); !errors.Is(err, ErrBadEndpoint) {
			t.Errorf("ParseEndpoint(%q): %v, want ErrBadEndpoint", bad, err)
		}
	}
}

// TestNotMemberIsTriedElsewhere: a node that says it is not a member is
// skipped like a follower with no leader, for reads and writes.
func TestNotMemberIsTriedElsewhere(t *testing.T) {
	good := newFakeNode(t)
	c := New([]string{notMemberEndpoint(t), good.srv.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h"}); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if _, err := c.Key(ctx, "k"); err != nil {
		t.Fatalf("key: %v", err)
	}
}

// TestWriteEverywhereUnansweredIsUnknown: a write that reached nodes which
// never answered may have been applied: it is reported as an unknown outcome,
// never as a plain failure, and the error names the endpoints that timed out.
func TestWriteEverywhereUnansweredIsUnknown(t *testing.T) {
	a, b := hangingEndpoint(t), hangingEndpoint(t)
	c := New([]string{a, b})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h"})
	if !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("acquire on frozen nodes: %v, want an unknown outcome", err)
	}
	for _, ep := range []string{a, b} {
		if !strings.Contains(err.Error(), ep+": timed out") {
			t.Fatalf("error %q does not say %s timed out", err, ep)
		}
	}
	if strings.Contains(err.Error(), "leadership lost") {
		t.Fatalf("error %q blames a lost leadership for nodes that did not answer", err)
	}
}

// TestSlowClusterIsWaitedFor: when every node answers, but slower than the
// attempt deadline (a disk stall), the deadline grows round by round and the
// write succeeds within the caller's deadline instead of timing out forever.
func TestSlowClusterIsWaitedFor(t *testing.T) {
	slow := func() string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(DefaultAttemptTimeout + 500*time.Millisecond):
			case <-r.Context().Done():
				return
			}
			writeJSON(w, http.StatusOK, Grant{Key: "k", Holder: "h", Token: fence.Token(1<<32 | 1), Epoch: 1, Seq: 1, TTL: "10s"})
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	c := New([]string{slow(), slow()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h"}); err != nil {
		t.Fatalf("acquire on a slow cluster: %v", err)
	}
}

// TestWriteCutByCallerDeadlineIsUnknown: a write still in flight on a node
// that did not answer when the caller's deadline ends may have been applied:
// it is an unknown outcome, not "unavailable" (which says nothing was done).
func TestWriteCutByCallerDeadlineIsUnknown(t *testing.T) {
	c := New([]string{hangingEndpoint(t)})
	ctx, cancel := context.WithTimeout(context.Background(), DefaultAttemptTimeout/4)
	defer cancel()
	_, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h"})
	if !errors.Is(err, ErrUnknownOutcome) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("acquire cut by the caller's deadline: %v, want only an unknown outcome", err)
	}
}

// TestWaitReady: WaitReady returns the status of the node that says it is
// the ready leader, past a frozen one; with none, its error names each
// endpoint and what it said.
func TestWaitReady(t *testing.T) {
	good := newFakeNode(t)
	frozen := hangingEndpoint(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := New([]string{frozen, good.srv.URL}).WaitReady(ctx)
	if err != nil || st.ID != "n2" {
		t.Fatalf("WaitReady: %+v, %v", st, err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	_, err = New([]string{frozen, notMemberEndpoint(t)}).WaitReady(ctx2)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), frozen+": timed out") || !strings.Contains(err.Error(), "not a member") {
		t.Fatalf("WaitReady with no ready leader: %v", err)
	}
}

// countingFrozenEndpoint accepts connections and never answers, as a node
// stopped by SIGSTOP after its listener's backlog; it counts the connections,
// one per attempt (a timed-out attempt closes its connection).
func countingFrozenEndpoint(t *testing.T) (string, func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + ln.Addr().String(), func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
}

// TestFrozenNodeWaitsWhileOthersSayTryAgain: after the leader froze, the two
// other nodes answer not_ready while the new leader waits out its takeover.
// The client tries them again, round after round, and not the node that
// just timed out: another attempt on it would cost a whole attempt deadline
// in which the new leader became ready and nobody asked.
func TestFrozenNodeWaitsWhileOthersSayTryAgain(t *testing.T) {
	frozen, attempts := countingFrozenEndpoint(t)
	var mu sync.Mutex
	refusals := 0
	notReadyThenServe := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		refusals++
		n := refusals
		mu.Unlock()
		if n <= 6 {
			writeError(w, http.StatusServiceUnavailable, "not_ready", "leader is not ready yet")
			return
		}
		switch r.URL.Path {
		case "/v1/acquire":
			writeJSON(w, http.StatusOK, Grant{Key: "k", Holder: "h", Token: fence.Token(1<<32 | 1), Epoch: 1, Seq: 1, TTL: "10s"})
		default:
			writeJSON(w, http.StatusOK, KeyInfo{Key: "k", Holder: "h", Token: fence.Token(1<<32 | 1), State: "held"})
		}
	}
	a := httptest.NewServer(http.HandlerFunc(notReadyThenServe))
	defer a.Close()
	b := httptest.NewServer(http.HandlerFunc(notReadyThenServe))
	defer b.Close()
	for _, op := range []string{"acquire", "key"} {
		t.Run(op, func(t *testing.T) {
			mu.Lock()
			refusals = 0
			mu.Unlock()
			before := attempts()
			c := New([]string{frozen, a.URL, b.URL}, WithAttemptTimeout(200*time.Millisecond), WithHedgeDelay(0))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var err error
			if op == "acquire" {
				_, err = c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h"})
			} else {
				_, err = c.Key(ctx, "k")
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := attempts() - before; n != 1 {
				t.Fatalf("the frozen node was tried %d times while the others answered not_ready, want once", n)
			}
		})
	}
}

// TestLeaderNamedInAnAnswerIsTriedNext: a node that lost the leader while
// forwarding an acquire answers that the outcome is unknown, naming the new
// leader. The client's next attempt goes to that leader, not to the next node
// in its list, which may be the old leader, frozen, and would cost a whole
// attempt deadline.
func TestLeaderNamedInAnAnswerIsTriedNext(t *testing.T) {
	frozen, attempts := countingFrozenEndpoint(t)
	leader := newFakeNode(t)
	follower := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(LeaderHeader, strings.TrimPrefix(leader.srv.URL, "http://"))
		writeError(w, http.StatusServiceUnavailable, "outcome_unknown", "leadership lost while committing: outcome unknown")
	}))
	defer follower.Close()
	c := New([]string{follower.URL, frozen, leader.srv.URL}, WithAttemptTimeout(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h", RequestID: "rid-1"}); err != nil {
		t.Fatal(err)
	}
	if n := attempts(); n != 0 {
		t.Fatalf("the node after the follower was tried %d times, though the follower named the leader", n)
	}
}

// TestPauseWhileTheLeaderTakesOver: between rounds the client backs off,
// doubling up to maxBackoff; while the leader answers not_ready (its takeover
// ends within a few hundred milliseconds) it asks again every takeoverPoll
// at most, and while nodes answer that no leader serves yet every
// electionPoll at most, so it does not leave a ready leader unasked for half
// a second.
func TestPauseWhileTheLeaderTakesOver(t *testing.T) {
	var got []time.Duration
	b := 20 * time.Millisecond
	p, tk, el := plainRound, takeoverRound, electionRound
	for _, end := range []roundEnd{p, p, p, tk, tk, p, p, p, tk, el, p, el} {
		var d time.Duration
		d, b = nextPause(b, end)
		got = append(got, d)
	}
	ms := time.Millisecond
	want := []time.Duration{20 * ms, 40 * ms, 80 * ms, 50 * ms, 50 * ms, 160 * ms, 320 * ms, 500 * ms, 50 * ms, 100 * ms, 500 * ms, 100 * ms}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pauses %v, want %v", got, want)
	}
	// From the start of a call, election rounds grow the backoff under
	// their cap: the rounds after them pause as long as without it.
	got, b = nil, 20*time.Millisecond
	for _, end := range []roundEnd{el, el, el, el, el, p} {
		var d time.Duration
		d, b = nextPause(b, end)
		got = append(got, d)
	}
	want = []time.Duration{20 * ms, 40 * ms, 80 * ms, 100 * ms, 100 * ms, 500 * ms}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pauses %v, want %v", got, want)
	}
}

// TestNodeInTouchWithTheTakeoverIsAskedAgain: behind proxies or NAT the
// client cannot map the leader's address to an endpoint. A node that
// answered that the new leader is not ready yet, or that an election cut off
// what it forwarded, is in touch with the cluster: it is asked again after a
// short pause, not left for the next node in the list, the frozen old leader.
func TestNodeInTouchWithTheTakeoverIsAskedAgain(t *testing.T) {
	for _, code := range []string{"not_ready", "outcome_unknown"} {
		t.Run(code, func(t *testing.T) {
			frozen, attempts := countingFrozenEndpoint(t)
			var mu sync.Mutex
			refusals := 0
			node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				refusals++
				n := refusals
				mu.Unlock()
				w.Header().Set(LeaderHeader, "10.1.2.3:7700") // no endpoint of the client's
				if n <= 2 {
					writeError(w, http.StatusServiceUnavailable, code, "leader is not ready yet")
					return
				}
				writeJSON(w, http.StatusOK, Grant{Key: "k", Holder: "h", Token: fence.Token(1<<32 | 1), Epoch: 1, Seq: 1, TTL: "10s"})
			}))
			defer node.Close()
			c := New([]string{node.URL, frozen}, WithAttemptTimeout(200*time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h", RequestID: "rid-1"}); err != nil {
				t.Fatal(err)
			}
			if n := attempts(); n != 0 {
				t.Fatalf("the frozen node was tried %d times after the other answered %s", n, code)
			}
		})
	}
}

// TestLeaderFoundByItsID: behind proxies the leader's address matches none of
// the client's endpoints; the client finds the leader's endpoint by the id
// its node answered with, and a follower's refusal that names the leader's
// id sends the next attempt there, not down the list to the frozen node.
func TestLeaderFoundByItsID(t *testing.T) {
	frozen, attempts := countingFrozenEndpoint(t)
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(NodeHeader, "n3")
		w.Header().Set(LeaderIDHeader, "n3")
		w.Header().Set(LeaderHeader, "fenced3:7700")
		writeJSON(w, http.StatusOK, Grant{Key: "k", Holder: "h", Token: fence.Token(1<<32 | 1), Epoch: 1, Seq: 1, TTL: "10s"})
	}))
	defer leader.Close()
	follower := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(NodeHeader, "n1")
		w.Header().Set(LeaderIDHeader, "n3")
		w.Header().Set(LeaderHeader, "fenced3:7700")
		writeError(w, http.StatusServiceUnavailable, "not_leader", "not the leader")
	}))
	defer follower.Close()
	c := New([]string{leader.URL, follower.URL, frozen}, WithAttemptTimeout(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h"}); err != nil {
		t.Fatal(err)
	}
	c.prefer(1) // as after an answer of the follower
	if _, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h"}); err != nil {
		t.Fatal(err)
	}
	if n := attempts(); n != 0 {
		t.Fatalf("the frozen node was tried %d times, though the follower named the leader by its id", n)
	}
	if got := c.order()[0]; got != leader.URL {
		t.Fatalf("the client prefers %s, want the leader %s", got, leader.URL)
	}
}

// TestTakeoverAnswersDoNotHoldTheClientForever: a node that keeps answering
// that a new leader is taking over is asked again only a few times before
// the client goes on to the other nodes, one of which serves.
func TestTakeoverAnswersDoNotHoldTheClientForever(t *testing.T) {
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusServiceUnavailable, "not_ready", "leader is not ready yet")
	}))
	defer stuck.Close()
	good := newFakeNode(t)
	c := New([]string{stuck.URL, good.srv.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h"}); err != nil {
		t.Fatalf("a node stuck answering not_ready kept the client from the one that serves: %v", err)
	}
}

// TestElectionPacesRetries: while the only node answers that no leader
// serves yet, the client asks it again every electionPoll at most, not at a
// backoff doubling to half a second, so a new leader is asked soon after it
// is ready; and only for maxElectionRounds rounds of a call, after which
// the backoff grows again, so a node cut off in a minority is not polled
// ten times a second for as long as the caller waits. Both bounds are
// counts of attempts over a few seconds (a slow machine makes fewer, and
// the first count has room for that).
func TestElectionPacesRetries(t *testing.T) {
	var mu sync.Mutex
	var at []time.Duration
	start := time.Now()
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		at = append(at, time.Since(start))
		mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "unavailable", "no leader")
	}))
	t.Cleanup(node.Close)
	c := New([]string{node.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire while no leader serves: %v; want the caller's deadline", err)
	}
	mu.Lock()
	defer mu.Unlock()
	early := 0
	for _, d := range at {
		if d < 2*time.Second {
			early++
		}
	}
	// Doubling to maxBackoff asks 8 times in the first two seconds
	// (pauses of 20, 40, 80, 160, 320 and 500 ms); electionPoll about 20.
	if early < 12 {
		t.Errorf("%d attempts in the first 2 s of an election (at %v); want at least 12", early, at)
	}
	// 20 rounds at electionPoll, then the backoff from 20 ms doubling to
	// maxBackoff: about 30 attempts in 5 s, against 50 without the bound.
	if len(at) > 36 {
		t.Errorf("%d attempts in 5 s of answers that no leader serves; want at most 36", len(at))
	}
}

// deadlineRecorder is a transport that notes how long each attempt was given
// (its context's deadline as it starts), per host.
type deadlineRecorder struct {
	mu    sync.Mutex
	given map[string][]time.Duration
}

func (d *deadlineRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if dl, ok := req.Context().Deadline(); ok {
		d.mu.Lock()
		d.given[req.URL.Host] = append(d.given[req.URL.Host], time.Until(dl))
		d.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (d *deadlineRecorder) of(endpoint string) []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Duration(nil), d.given[strings.TrimPrefix(endpoint, "http://")]...)
}

// TestElectionAnswerShortensTheNextAttempts: a node answers that no leader
// serves (it lost the old leader and an election is on). The next node in
// the list may be that old leader, frozen, and the client cannot tell it by
// its address (behind proxies, or before any answer named it): it is given
// half the attempt time, as a node that timed out lately is, and the new
// leader after it is reached that much sooner. A round with no such answer
// gives every node the whole time.
func TestElectionAnswerShortensTheNextAttempts(t *testing.T) {
	frozen, attempts := countingFrozenEndpoint(t)
	electing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "no ready leader known to this node")
	}))
	defer electing.Close()
	leader := newFakeNode(t)
	const attempt = 2 * time.Second
	rec := &deadlineRecorder{given: map[string][]time.Duration{}}
	c := New([]string{electing.URL, frozen, leader.srv.URL}, WithAttemptTimeout(attempt),
		WithHTTPClient(&http.Client{Transport: rec}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Acquire(ctx, AcquireRequest{Key: "k", Holder: "h", RequestID: "rid-1"}); err != nil {
		t.Fatal(err)
	}
	if n := attempts(); n != 1 {
		t.Fatalf("the frozen node was tried %d times, want once", n)
	}
	for _, g := range rec.of(frozen) {
		if g > attempt*3/4 {
			t.Fatalf("after an answer that no leader serves, the next node was given %v of a %v attempt; want half", g, attempt)
		}
	}
	if g := rec.of(electing.URL); len(g) == 0 || g[0] < attempt*3/4 {
		t.Fatalf("the round's first attempt was given %v of a %v attempt; want the whole", g, attempt)
	}
}
