package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fenced/fenced/acl"
	"github.com/fenced/fenced/client"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/metrics"
)

// The batch routes answer many verifies, or many keepalives, with one HTTP
// request and one proof of leadership. Most of a leader's CPU per verify or
// keepalive goes to reading, parsing and answering the HTTP request around
// it, so a client that sends its concurrent calls together (Client does, see
// coalesce.go) costs the leader a fraction of that.
//
// Each item is judged exactly as its single route judges it (the same
// validation, the same Node code, the same answer), after a proof of
// leadership obtained after the batch was received. An item was asked for
// before its batch was sent, so its verdict is taken inside its own
// request's interval: a batched verify is as linearizable as a single one.
//
// A batch that cannot be served as a whole (not the leader, not ready,
// leadership not confirmed) is answered as the single route answers such a
// request, so clients follow the leader and retry the same way.

// batchRoutes are the routes whose requests count one per item against the
// rate limit.
var batchRoutes = map[string]bool{"POST /v1/verify/batch": true, "POST /v1/keepalive/batch": true}

// rateKeyOf carries, in a batch request's context, the rate-limit bucket
// its items are counted in (security.go admit).
type rateKeyOf struct{}

// checkBatchSize refuses an empty or too large batch.
func checkBatchSize(what string, n int) error {
	switch {
	case n == 0:
		return fmt.Errorf("%w: %s is required and may not be empty", cluster.ErrBadRequest, what)
	case n > client.MaxBatchItems:
		return fmt.Errorf("%w: %d %s; a batch holds at most %d", cluster.ErrBadRequest, n, what, client.MaxBatchItems)
	}
	return nil
}

// countBatch counts a batch of n items of op in the metrics and its items
// beyond the first (admitted as the request) against the client's rate
// limit.
func (s *Server) countBatch(r *http.Request, op string, n int) {
	metrics.Batches.WithLabelValues(op).Inc()
	metrics.BatchItems.WithLabelValues(op).Add(float64(n))
	if key, ok := r.Context().Value(rateKeyOf{}).(string); ok && s.sec != nil {
		s.sec.rate.charge(key, n-1, time.Now())
	}
}

// forwardable reports whether err says another node should serve the
// request, and this request may still be forwarded to it.
func forwardable(r *http.Request, err error) bool {
	return (errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, cluster.ErrNotReady)) && r.Header.Get(forwardedHeader) == ""
}

// verifyBatch serves POST /v1/verify/batch. Like verify it fails closed:
// whatever it cannot prove is a refusal.
func (s *Server) verifyBatch(w http.ResponseWriter, r *http.Request) {
	refuse := verifyRefusal(w)
	body, ok := readVerifyBody(w, r, refuse)
	if !ok {
		return
	}
	var req client.VerifyBatchRequest
	err := decode(body, &req)
	if err == nil {
		err = checkBatchSize("checks", len(req.Checks))
	}
	if err != nil {
		code, _ := codeOf(err)
		refuse(http.StatusBadRequest, code, err)
		return
	}
	s.countBatch(r, "verify", len(req.Checks))
	results := make([]client.VerifyResult, len(req.Checks))
	checks := make([]cluster.VerifyCheck, 0, len(req.Checks))
	at := make([]int, 0, len(req.Checks)) // checks[j] answers results[at[j]]
	verifiable := s.mayFilter(r.Context(), acl.Verify)
	for i, c := range req.Checks {
		tok, code, err := checkVerify(c)
		if err != nil {
			metrics.Refusals.WithLabelValues(code).Inc()
			results[i] = client.VerifyResult{Status: http.StatusBadRequest, Reason: string(cluster.ReasonMalformed), Code: code, Message: err.Error()}
			continue
		}
		if verifiable != nil && !verifiable(c.Key) {
			metrics.Refusals.WithLabelValues("forbidden").Inc()
			id, _ := IdentityFrom(r.Context())
			results[i] = client.VerifyResult{Status: http.StatusForbidden, Reason: reasonForbidden, Code: "forbidden", Message: forbiddenKey(id.Name, acl.Verify, c.Key).Error()}
			continue
		}
		checks = append(checks, cluster.VerifyCheck{Key: c.Key, Token: tok, Holder: c.Holder})
		at = append(at, i)
	}
	if len(checks) > 0 {
		if !s.node.Ready() && r.Header.Get(forwardedHeader) == "" {
			s.proxyVerifyBatch(w, r, body, len(req.Checks))
			return
		}
		vs, err := s.node.VerifyBatch(r.Context(), checks)
		if forwardable(r, err) {
			s.proxyVerifyBatch(w, r, body, len(req.Checks))
			return
		}
		for j, v := range vs {
			results[at[j]] = verifyResultOf(verdictOf(v, err))
		}
	}
	writeJSON(w, http.StatusOK, client.VerifyBatchResponse{Results: results})
}

func verifyResultOf(v client.VerifyResponse) client.VerifyResult {
	return client.VerifyResult{Status: http.StatusOK, Allow: v.Allow, Reason: v.Reason, CurrentToken: v.CurrentToken, Holder: v.Holder}
}

// proxyVerifyBatch forwards a verify batch as proxyVerify forwards a verify:
// the leader's verdicts, or its refusal of bad input, are passed on; any
// failure to reach it refuses every check as unavailable.
func (s *Server) proxyVerifyBatch(w http.ResponseWriter, r *http.Request, body []byte, n int) {
	rec := &captureWriter{header: http.Header{}}
	s.proxy(rec, r, body, false)
	// A leader that does not know the route (404, an older version) says
	// so, for the client to send single verifies.
	if rec.status == http.StatusOK || rec.status == http.StatusBadRequest || rec.status == http.StatusNotFound {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.buf.Bytes())
		return
	}
	results := make([]client.VerifyResult, n)
	for i := range results {
		results[i] = verifyResultOf(client.VerifyResponse{Reason: string(cluster.ReasonUnavailable)})
	}
	writeJSON(w, http.StatusOK, client.VerifyBatchResponse{Results: results})
}

// keepaliveBatch serves POST /v1/keepalive/batch.
//
// A holder the client may not act as gets the single route's 403 as its own
// result, and the other holders are served: a batch carries the calls of
// many callers of one client, and one caller naming a holder it may not use
// must not fail the others. Nothing is read or renewed for a refused holder,
// so its result says nothing of that holder's leases.
func (s *Server) keepaliveBatch(w http.ResponseWriter, r *http.Request) {
	if err := checkContentType(r); err != nil {
		writeUnsupportedMediaType(w, err, false)
		return
	}
	body, err := readBody(w, r)
	var req client.KeepaliveBatchRequest
	if err == nil {
		err = decode(body, &req)
	}
	if err == nil {
		err = checkBatchSize("holders", len(req.Holders))
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	s.countBatch(r, "keepalive", len(req.Holders))
	results := make([]client.KeepaliveResult, len(req.Holders))
	holders := make([]string, 0, len(req.Holders))
	at := make([]int, 0, len(req.Holders)) // holders[j] answers results[at[j]]
	for i, h := range req.Holders {
		if err := firstOf(checkName("holder", h, client.MaxHolderLen, true), s.mayActAs(r, h)); err != nil {
			results[i] = itemError(err)
			continue
		}
		holders = append(holders, h)
		at = append(at, i)
	}
	if len(holders) > 0 {
		if !s.node.Ready() && r.Header.Get(forwardedHeader) == "" {
			s.proxy(w, r, body, true)
			return
		}
		ls, err := s.node.KeepaliveBatch(r.Context(), holders, s.mayFilter(r.Context(), acl.Lock))
		if forwardable(r, err) {
			s.proxy(w, r, body, true)
			return
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		for j, h := range holders {
			k := keepaliveOf(h, ls[j])
			results[at[j]] = client.KeepaliveResult{Status: http.StatusOK, Holder: k.Holder, Renewed: k.Renewed}
		}
	}
	writeJSON(w, http.StatusOK, client.KeepaliveBatchResponse{Results: results})
}

// mayActAs is the holder check the single keepalive route makes before its
// handler runs (security.go authorize), made here per holder.
func (s *Server) mayActAs(r *http.Request, holder string) error {
	if s.sec == nil || !s.sec.o.AuthEnabled() {
		return nil
	}
	id, _ := IdentityFrom(r.Context())
	if !id.MayActAs(holder) {
		return refusal(ErrForbidden, "%s may not act as holder %q: a client's holders are %q or start with %q", id, holder, id.Name, id.Name+"/")
	}
	return nil
}

// itemError is the result of an item refused as the single route would
// refuse its request.
func itemError(err error) client.KeepaliveResult {
	code, status := codeOf(err)
	metrics.Refusals.WithLabelValues(code).Inc()
	return client.KeepaliveResult{Status: status, Code: code, Message: err.Error()}
}
