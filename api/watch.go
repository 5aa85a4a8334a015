package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fenced/fenced/acl"
	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fsm"
	"github.com/fenced/fenced/metrics"
)

// ErrCompacted: a watch asked for history the node no longer holds (HTTP
// 410, code "compacted"). Read the current state and watch from its index.
var ErrCompacted = fsm.ErrCompacted

// DefaultWatchWriteTimeout is how long a watch stream waits for one write
// to a watcher that does not read before it ends the stream.
const DefaultWatchWriteTimeout = 10 * time.Second

// watchNode is what watches need of a node beyond Node.
type watchNode interface {
	ReadIndex(ctx context.Context) (uint64, error)
	WaitApplied(ctx context.Context, index uint64) error
	Feed() *fsm.Feed
	FSM() *fsm.FSM
}

func (s *Server) watchNode() (watchNode, error) {
	wn, ok := s.node.(watchNode)
	if !ok {
		return nil, fmt.Errorf("%w: this node does not serve watches", ErrUnavailable)
	}
	return wn, nil
}

func watchEventOf(ev fsm.Event) client.WatchEvent {
	if ev.Type == fsm.EventDeleted {
		// The key is gone: its last grant, and no state of its own.
		return client.WatchEvent{Type: client.WatchDeleted, Index: ev.Index, Key: ev.Key, Holder: ev.Holder, Token: ev.Token, State: client.StateAbsent}
	}
	we := client.WatchEvent{Type: string(ev.Type), Index: ev.Index, Key: ev.Key, Holder: ev.Holder, Token: ev.Token, State: ev.State.String(),
		TTL: ev.TTL.String(), PrevHolder: ev.PrevHolder, PrevToken: ev.PrevToken, Ended: string(ev.Ended), Value: ev.Value, Limit: int(ev.Limit), Mode: modeOf(ev.Shared)}
	if ev.LockDelay > 0 {
		we.LockDelay = ev.LockDelay.String()
	}
	return we
}

func watchStateOf(k fsm.KeyState, index uint64) client.WatchEvent {
	return client.WatchEvent{Type: client.WatchState, Index: index, Key: k.Key, Holder: k.Holder, Token: k.Token, State: k.State.String(), TTL: k.TTL.String(), Value: k.Value}
}

// parseIndex reads a log index given as decimal text; "" is 0.
func parseIndex(what, v string) (uint64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not a log index", cluster.ErrBadRequest, what, v)
	}
	return n, nil
}

// keyRead serves GET /v1/keys/{key}: a plain read, or with ?index= or
// ?wait= a blocking one.
func (s *Server) keyRead(w http.ResponseWriter, r *http.Request) {
	if err := s.may(r.Context(), acl.Read, r.PathValue("key")); err != nil {
		writeErr(w, err)
		return
	}
	q := r.URL.Query()
	if !q.Has("index") && !q.Has("wait") {
		s.read(s.key)(w, r)
		return
	}
	forwarded := r.Header.Get(forwardedHeader) != ""
	if !s.node.Ready() && !forwarded {
		s.proxy(w, r, nil, false)
		return
	}
	out, index, err := s.blockingKey(r)
	if (errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, cluster.ErrNotReady)) && !forwarded {
		s.proxy(w, r, nil, false)
		return
	}
	if index > 0 {
		w.Header().Set(client.IndexHeader, strconv.FormatUint(index, 10))
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// blockingKey waits until the key changed after ?index= (or ?wait= ends),
// then reads it linearizably. The index it answers is taken before the
// read, so the state is at least as new as it: a later wait from it never
// misses a change, at worst it returns at once.
func (s *Server) blockingKey(r *http.Request) (*client.IndexedKey, uint64, error) {
	name := r.PathValue("key")
	q := r.URL.Query()
	if err := checkName("key", name, client.MaxKeyLen, true); err != nil {
		return nil, 0, err
	}
	index, err := parseIndex("index", q.Get("index"))
	if err != nil {
		return nil, 0, err
	}
	wait, err := parseDuration("wait", q.Get("wait"), client.DefaultBlockWait, 0, client.MaxWait)
	if err != nil {
		return nil, 0, err
	}
	wn, err := s.watchNode()
	if err != nil {
		return nil, 0, err
	}
	if index > 0 && wait > 0 {
		// A history that no longer reaches back to index fails the
		// subscription: the answer is then immediate.
		if sub, err := wn.Feed().Subscribe(name, true, index); err == nil {
			ctx, cancel := context.WithTimeout(r.Context(), wait)
			_, _ = sub.Next(ctx)
			cancel()
			sub.Close()
		}
		if err := r.Context().Err(); err != nil {
			return nil, 0, err
		}
	}
	last := wn.Feed().Last()
	k, ok, err := s.node.Key(r.Context(), name)
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		return nil, last, fsm.ErrUnknownKey
	}
	return &client.IndexedKey{KeyInfo: keyInfoOf(k), WatchIndex: last}, last, nil
}

// readIndexHandler serves GET /v1/watch/index on the leader.
func (s *Server) readIndexHandler(ctx context.Context, _ []byte, _ *http.Request) (any, error) {
	wn, err := s.watchNode()
	if err != nil {
		return nil, err
	}
	idx, err := wn.ReadIndex(ctx)
	if err != nil {
		return nil, err
	}
	return client.ReadIndexResponse{Index: idx}, nil
}

// readIndex returns the index a linearizable read would be served at, from
// this node when it leads, else from the leader, and waits until this node
// applied it.
func (s *Server) readIndex(ctx context.Context, r *http.Request, wn watchNode) (uint64, error) {
	idx, err := wn.ReadIndex(ctx)
	if errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, cluster.ErrNotReady) {
		idx, err = s.leaderReadIndex(ctx, r)
	}
	if err != nil {
		return 0, err
	}
	return idx, wn.WaitApplied(ctx, idx)
}

// leaderReadIndex asks the leader for its read index, as a forwarded
// request: only to a leader that proves its id, and never with the
// client's credentials.
func (s *Server) leaderReadIndex(ctx context.Context, r *http.Request) (uint64, error) {
	if r.Header.Get(forwardedHeader) != "" {
		return 0, cluster.ErrNotLeader
	}
	lid, addr := s.node.Leader()
	if lid == "" || addr == "" {
		return 0, fmt.Errorf("%w: no known leader", ErrUnavailable)
	}
	base := s.leaderURL(addr)
	fwd, err := s.forwarder(lid, base)
	if err != nil {
		return 0, err
	}
	// A leader that is gone does not answer: give up as soon as another
	// one is known, as a forwarded request does.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.cancelOnLeaderChange(ctx, cancel, lid)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/watch/index", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(forwardedHeader, "1")
	s.forwardIdentity(req, r)
	resp, err := fwd.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%w: leader %s unreachable", ErrUnavailable, lid)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%w: leader %s answered %d to a read index", ErrUnavailable, lid, resp.StatusCode)
	}
	var out client.ReadIndexResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("%w: leader %s: %v", ErrUnavailable, lid, err)
	}
	return out.Index, nil
}

// watchRequest is a parsed GET /v1/watch.
type watchRequest struct {
	match    string // prefix, or the key when exact
	exact    bool
	from     uint64
	fresh    bool // no resume index: start with the current state
	progress time.Duration
}

func parseWatch(r *http.Request) (watchRequest, error) {
	q := r.URL.Query()
	var wr watchRequest
	prefix, key := q.Get("prefix"), q.Get("key")
	if err := firstOf(checkName("prefix", prefix, client.MaxPrefixLen, false), checkName("key", key, client.MaxKeyLen, false)); err != nil {
		return wr, err
	}
	if prefix != "" && key != "" {
		return wr, fmt.Errorf("%w: give prefix or key, not both", cluster.ErrBadRequest)
	}
	wr.match, wr.exact = prefix, key != ""
	if wr.exact {
		wr.match = key
	}
	from := q.Get("from")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		from = id // a reconnecting EventSource resumes after its last event
	}
	wr.fresh = from == ""
	var err error
	if wr.from, err = parseIndex("from", strings.TrimSpace(from)); err != nil {
		return wr, err
	}
	wr.progress, err = parseDuration("progress", q.Get("progress"), client.DefaultProgress, client.MinProgress, client.MaxProgress)
	return wr, err
}

// watch serves GET /v1/watch as server-sent events. Any node serves it, from
// its own applied state, once it applied the index a linearizable read
// would be served at (a check that began after the request came); every
// progress interval that passes without an event it confirms again (with a
// check that began since it last sent anything) and sends a sync event,
// and it ends the stream when it cannot.
func (s *Server) watch(w http.ResponseWriter, r *http.Request) {
	wr, err := parseWatch(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	// An exact key the identity may not read is refused; a prefix stream
	// carries only the keys it may read.
	var readable func(key string) bool
	if wr.exact {
		err = s.may(r.Context(), acl.Read, wr.match)
	} else {
		readable = s.mayFilter(r.Context(), acl.Read)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	wn, err := s.watchNode()
	if err != nil {
		refuseWatch(w, err)
		return
	}
	ctx, arrived := r.Context(), time.Now()
	check := func(ctx context.Context) (uint64, error) { return s.readIndex(ctx, r, wn) }
	idx, err := s.checks.get(ctx, arrived, check)
	if err != nil {
		refuseWatch(w, err)
		return
	}
	if !wr.fresh && wr.from > idx {
		// No node served an id after the commit index the check found,
		// which it took after this request came: this one is from
		// another cluster, or from before a restore. What lies between
		// cannot be told, so nothing is claimed current.
		writeErr(w, fmt.Errorf("%w: index %d is after the cluster's commit index %d (an id from another cluster, or from before a restore); watch again without it",
			fsm.ErrFuture, wr.from, idx))
		return
	}
	var state []fsm.KeyState
	if wr.fresh {
		state, wr.from = wn.FSM().KeysAt(wr.match, wr.exact)
	}
	sub, err := wn.Feed().Subscribe(wr.match, wr.exact, wr.from)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer sub.Close()
	s.watching.Add(1)
	metrics.WatchStreams.Inc()
	defer func() {
		s.watching.Add(-1)
		metrics.WatchStreams.Dec()
	}()
	sseHeader(w)
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{cache: &s.frames, w: w, rc: http.NewResponseController(w), timeout: s.watchWriteTimeout, readable: readable}
	defer sw.end(s.log)
	sw.retry(0)
	for _, k := range state {
		if readable == nil || readable(k.Key) {
			sw.event("", client.WatchState, watchStateOf(k, wr.from))
		}
	}
	if wr.fresh && wr.exact && len(state) == 0 {
		// Said, not left to be inferred from silence: a watcher that
		// resyncs learns that the key it knew is gone.
		sw.event("", client.WatchState, client.WatchEvent{Type: client.WatchState, Index: wr.from, Key: wr.match, State: client.StateAbsent})
	}
	if !s.sendPoll(sw, sub) {
		return
	}
	// One timer for the stream, not one per event, and not reset per event
	// either: a delivery notes the time, and the timer, when it fires,
	// waits out what is left of the quiet interval. A thousand watchers of
	// a key each take every event.
	quiet := time.NewTimer(wr.progress)
	defer quiet.Stop()
	sent := time.Now()
	var spare []fsm.Event // the events of the last batch, written and done with
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.Ready():
			// Ready has a value whenever events were buffered since the
			// last Poll, so a stream polls once per wake-up.
			b, err := sub.PollInto(spare)
			if err != nil {
				sw.reset(err)
				return
			}
			if len(b.Events) > 0 {
				if !sw.events(b) || !sw.flush() {
					return
				}
				sent = time.Now()
			}
			spare = b.Events
		case <-quiet.C:
			if since := time.Since(sent); since < wr.progress {
				quiet.Reset(wr.progress - since)
				continue
			}
			// Quiet: confirm this node is current, then say so. Any
			// check of this node's that began since this stream last
			// sent anything will do: the streams of a node share them.
			pctx, cancel := context.WithTimeout(ctx, wr.progress)
			_, err := s.checks.get(pctx, sent, check)
			cancel()
			if err != nil {
				s.log.Debug("watch ends: cannot confirm it is current", "error", err)
				metrics.WatchEnded.WithLabelValues("unconfirmed").Inc()
				sw.unavailable(err)
				return
			}
			if !s.sendPoll(sw, sub) {
				return
			}
			sent = time.Now()
			quiet.Reset(wr.progress)
		}
	}
}

// refuseWatch answers a watch the node cannot serve. A refusal that may
// pass (no leader, not ready, a limit: 503 or 429) is a stream that says so
// and ends: a browser's EventSource stops for good on any other answer than
// 200 text/event-stream, and reconnects after this one. Others (bad
// parameters, credentials, a resume that cannot be served) are the JSON
// error, which ends an EventSource as they should.
func refuseWatch(w http.ResponseWriter, err error) {
	code, status := codeOf(err)
	if status != http.StatusServiceUnavailable && status != http.StatusTooManyRequests {
		writeErr(w, err)
		return
	}
	metrics.Refusals.WithLabelValues(code).Inc()
	sseHeader(w)
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	sw.retry(retryHint(err))
	sw.unavailable(err)
}

// retryHint returns the wait a limit asks for, or 0.
func retryHint(err error) time.Duration {
	var h interface{ RetryAfterHint() time.Duration }
	if errors.As(err, &h) {
		return h.RetryAfterHint()
	}
	return 0
}

// sendPoll sends what the subscription buffered and a sync event.
func (s *Server) sendPoll(sw *sseWriter, sub *fsm.Sub) bool {
	b, err := sub.Poll()
	if err != nil {
		sw.reset(err)
		return false
	}
	sw.events(b)
	sw.event(strconv.FormatUint(b.Through, 10), client.WatchSync, client.WatchEvent{Type: client.WatchSync, Index: b.Through})
	return sw.flush()
}
