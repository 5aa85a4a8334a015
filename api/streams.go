package api

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/fenced/fenced/client"
)

// streamLimits counts the long-lived requests (watch streams, blocking
// reads) each client has open on this node: each holds a goroutine, a
// connection, buffers and, for a watch, a subscription, so one careless
// client could otherwise pin the node's memory for everyone.
type streamLimits struct {
	mu   sync.Mutex
	open map[string]int
}

// streams bounds the watches and blocking reads of each client identity (of
// each IP address, when anonymous) with ServerOptions.MaxStreamsPerIdentity;
// over it the request is refused with 429 too_many_watches (a watch with a
// stream that says so, which a browser's EventSource retries). A plain
// read of a key passes through uncounted.
func (s *Server) streams(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !longLived(r) {
			h(w, r)
			return
		}
		done, err := s.openStream(r)
		if err != nil && r.URL.Path == "/v1/watch" {
			refuseWatch(w, err) // a stream an EventSource retries, not a 429 that ends it
			return
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		defer done()
		h(w, r)
	}
}

// longLived reports whether r stays open until something changes: a watch,
// or a read of a key with ?index= or ?wait=.
func longLived(r *http.Request) bool {
	if r.URL.Path == "/v1/watch" {
		return true
	}
	q := r.URL.Query()
	return q.Has("index") || q.Has("wait")
}

// openStream counts one more stream of r's client, or refuses it.
func (s *Server) openStream(r *http.Request) (done func(), err error) {
	if s.sec == nil || s.sec.o.MaxStreamsPerIdentity <= 0 {
		return func() {}, nil
	}
	max, who := s.sec.o.MaxStreamsPerIdentity, clientKey(r)
	l := &s.sec.streams
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[who] >= max {
		return nil, fmt.Errorf("%w: %s has %d watches and blocking reads open on this node, as many as it may (--max-watches-per-identity)", client.ErrTooManyWatches, describeClient(who), max)
	}
	if l.open == nil {
		l.open = map[string]int{}
	}
	l.open[who]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.open[who]--; l.open[who] <= 0 {
			delete(l.open, who)
		}
	}, nil
}

// clientKey names the client a request counts against: its identity when
// authenticated, its IP address otherwise. No header of the request is
// believed for it.
func clientKey(r *http.Request) string {
	if id, ok := IdentityFrom(r.Context()); ok && id.Name != "" {
		return "id:" + string(id.Role) + ":" + id.Name
	}
	return "ip:" + remoteHost(r)
}

func describeClient(key string) string {
	if len(key) > 3 && key[:3] == "ip:" {
		return "address " + key[3:]
	}
	return "identity " + key[3:]
}
