package backend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fenced/fenced/client"
)

// Proxies stand between the workload's clients and the nodes' HTTP APIs: one
// HTTP proxy per node, on loopback, in the harness. Each passes a request on
// to its node and hands the node's answer back. While a loss probability is
// set, each answer is lost with that probability *after the node served the
// request*: the proxy reads the node's whole answer, then either closes the
// client's connection without a byte of it (a drop) or sends the head and
// part of the body and then closes it (a cut). The client sent its request
// and heard nothing definite, so for a write the outcome is unknown and the
// client retries it. The nodes reach each other directly, never through a
// proxy, so the cluster itself is not hurt: only its answers are lost.
type Proxies struct {
	log      hclog.Logger
	upstream *http.Transport
	servers  []*http.Server
	eps      []string
	// leaderOf maps a node's HTTP address to its proxy's, so a client that
	// learns the leader from an answer's X-Fenced-Leader header prefers the
	// leader's proxy and keeps the path it would take without proxies.
	leaderOf map[string]string

	mu    sync.Mutex
	auth  string // Authorization of requests that carry none
	rng   *rand.Rand
	loss  float64
	stats LossStats
}

// LossStats counts what the proxies did with answers.
type LossStats struct {
	// Forwarded is the number of requests the nodes answered.
	Forwarded int `json:"forwarded"`
	// Dropped answers: the connection was closed before any byte of it.
	Dropped int `json:"dropped"`
	// Cut answers: the head and part of the body, then the connection closed.
	Cut int `json:"cut"`
	// Lost counts the lost answers by route: "acquire", "acquire+wait",
	// "release", "release+force", "renew", "verify", ...
	Lost map[string]int `json:"lost,omitempty"`
}

// String is one line for logs and the fault timeline.
func (s LossStats) String() string {
	routes := make([]string, 0, len(s.Lost))
	for r := range s.Lost {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	parts := make([]string, 0, len(routes))
	for _, r := range routes {
		parts = append(parts, fmt.Sprintf("%s %d", r, s.Lost[r]))
	}
	return fmt.Sprintf("%d answers lost (%d dropped, %d cut) of %d: %s", s.Dropped+s.Cut, s.Dropped, s.Cut, s.Forwarded, strings.Join(parts, ", "))
}

// maxProxyBody bounds a request or answer body the proxy buffers; fenced
// refuses larger requests anyway (client.MaxBodyBytes).
const maxProxyBody = 4 << 20

// NewProxies starts one proxy per endpoint (a node's HTTP address, as the
// harness reaches it) on 127.0.0.1 and returns them passing every answer
// through. seed seeds which answers are lost.
func NewProxies(endpoints []string, seed int64, log hclog.Logger) (*Proxies, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	p := &Proxies{
		log: log,
		upstream: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
			MaxIdleConnsPerHost: 32,
			IdleConnTimeout:     30 * time.Second,
		},
		leaderOf: map[string]string{},
		rng:      rand.New(rand.NewSource(seed)),
		stats:    LossStats{Lost: map[string]int{}},
	}
	for _, ep := range endpoints {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("proxy for %s: %w", ep, err)
		}
		srv := &http.Server{Handler: p.handler(ep), ReadHeaderTimeout: 5 * time.Second}
		p.servers = append(p.servers, srv)
		p.eps = append(p.eps, ln.Addr().String())
		p.leaderOf[ep] = ln.Addr().String()
		go func() { _ = srv.Serve(ln) }()
	}
	return p, nil
}

// Endpoints returns the proxies' addresses, in the order of the endpoints
// they stand for.
func (p *Proxies) Endpoints() []string { return append([]string(nil), p.eps...) }

// Front returns the proxy that stands for a node's endpoint, or the endpoint
// itself when none does: a nemesis that names a node to the clients names
// the address they reach it by.
func (p *Proxies) Front(ep string) string {
	if f, ok := p.leaderOf[ep]; ok {
		return f
	}
	return ep
}

// SetBearer makes the proxies present token as a bearer token on every
// request that carries no Authorization of its own: the workload's clients
// then act as one client identity without knowing it.
func (p *Proxies) SetBearer(token string) {
	p.mu.Lock()
	p.auth = "Bearer " + token
	p.mu.Unlock()
}

// SetLoss sets the probability with which an answer is lost (0: none).
func (p *Proxies) SetLoss(prob float64) {
	p.mu.Lock()
	p.loss = prob
	p.mu.Unlock()
}

// Stats returns the counts so far.
func (p *Proxies) Stats() LossStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Lost = make(map[string]int, len(p.stats.Lost))
	for k, v := range p.stats.Lost {
		s.Lost[k] = v
	}
	return s
}

// Close stops the proxies and closes their connections.
func (p *Proxies) Close() error {
	var errs []error
	for _, s := range p.servers {
		errs = append(errs, s.Close())
	}
	p.upstream.CloseIdleConnections()
	return errors.Join(errs...)
}

// How a lost answer is lost.
type loss uint8

const (
	keep loss = iota
	drop
	cut
)

// decide draws the fate of one answer and counts it.
func (p *Proxies) decide(route string) loss {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Forwarded++
	if p.loss <= 0 || p.rng.Float64() >= p.loss {
		return keep
	}
	p.stats.Lost[route]++
	if p.rng.Intn(2) == 0 {
		p.stats.Dropped++
		return drop
	}
	p.stats.Cut++
	return cut
}

// handler forwards to the node at ep.
func (p *Proxies) handler(ep string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxProxyBody))
		if err != nil {
			http.Error(w, "proxy: read request: "+err.Error(), http.StatusBadRequest)
			return
		}
		// The client's cancellation travels on, as it would on a direct
		// connection: a client that gives up closes the node's request too.
		req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+ep+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, "proxy: "+err.Error(), http.StatusBadRequest)
			return
		}
		for k, vs := range r.Header {
			if hopByHop(k) {
				continue
			}
			req.Header[k] = vs
		}
		p.mu.Lock()
		if p.auth != "" && req.Header.Get("Authorization") == "" {
			req.Header.Set("Authorization", p.auth)
		}
		p.mu.Unlock()
		resp, err := p.upstream.RoundTrip(req)
		var op *net.OpError
		switch {
		case errors.As(err, &op) && op.Op == "dial":
			// The node never got the request: say so, as a refused
			// connection would, so the client knows nothing was done.
			writeUnavailable(w, ep, err)
			return
		case err != nil:
			// Sent, then no answer (the node died or the client gave up):
			// the client sees the same, a connection closed without one.
			p.log.Debug("proxy: node did not answer", "node", ep, "path", r.URL.Path, "error", err)
			panic(http.ErrAbortHandler)
		}
		answer, err := io.ReadAll(io.LimitReader(resp.Body, maxProxyBody))
		resp.Body.Close()
		if err != nil {
			panic(http.ErrAbortHandler) // cut by the node: cut for the client too
		}
		fate := p.decide(route(r.URL.Path, body))
		if fate == drop {
			// The node served the request; its answer goes nowhere.
			panic(http.ErrAbortHandler)
		}
		for k, vs := range resp.Header {
			if hopByHop(k) || k == "Content-Length" {
				continue
			}
			w.Header()[k] = vs
		}
		if l := resp.Header.Get(client.LeaderHeader); l != "" {
			if px, ok := p.leaderOf[l]; ok {
				w.Header().Set(client.LeaderHeader, px)
			}
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(answer)))
		w.WriteHeader(resp.StatusCode)
		if fate == cut {
			// The head and half the body, then the connection ends: the
			// client reads an unexpected EOF.
			_, _ = w.Write(answer[:len(answer)/2])
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			panic(http.ErrAbortHandler)
		}
		_, _ = w.Write(answer)
	})
}

// writeUnavailable answers 503 "unavailable", which the API client reads as
// "nothing was done, try another node".
func writeUnavailable(w http.ResponseWriter, ep string, err error) {
	data, _ := json.Marshal(client.ErrorResponse{Code: "unavailable", Message: fmt.Sprintf("proxy: node %s unreachable: %v", ep, err)})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(data)
}

// route names a request for the loss counts: its path's last element, with
// "+wait" for a waiting acquire and "+force" for a forced release.
func route(path string, body []byte) string {
	name := path[strings.LastIndex(path, "/")+1:]
	if strings.HasPrefix(path, "/v1/keys/") {
		name = "key" // a key's name is not a route
	}
	var b struct {
		Wait  string `json:"wait"`
		Force bool   `json:"force"`
	}
	_ = json.Unmarshal(body, &b) // not JSON: no flags
	switch {
	case name == "acquire" && b.Wait != "":
		name += "+wait"
	case name == "release" && b.Force:
		name += "+force"
	}
	return name
}

func hopByHop(h string) bool {
	switch http.CanonicalHeaderKey(h) {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}
