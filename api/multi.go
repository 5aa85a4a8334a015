package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/fenced/fenced/acl"
	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fsm"
)

// acquireMulti grants every key of a set to one holder in one log entry, or
// none (POST /v1/acquire/multi). Bad input (no keys, more than
// client.MaxMultiKeys, a key given twice, an invalid key) is a 400 naming
// the field, and nothing changes.
func (s *Server) acquireMulti(ctx context.Context, body []byte, _ *http.Request) (any, error) {
	var req client.AcquireMultiRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if len(req.Keys) == 0 || len(req.Keys) > client.MaxMultiKeys {
		return nil, fmt.Errorf("%w: keys must name 1 to %d keys, not %d", cluster.ErrBadRequest, client.MaxMultiKeys, len(req.Keys))
	}
	seen := make(map[string]bool, len(req.Keys))
	for _, k := range req.Keys {
		if err := checkName("keys", k, client.MaxKeyLen, true); err != nil {
			return nil, err
		}
		if seen[k] {
			return nil, fmt.Errorf("%w: keys names %q twice", cluster.ErrBadRequest, k)
		}
		seen[k] = true
	}
	if err := firstOf(checkName("holder", req.Holder, client.MaxHolderLen, true), checkName("request_id", req.RequestID, client.MaxRequestIDLen, false)); err != nil {
		return nil, err
	}
	for _, k := range req.Keys {
		if err := s.may(ctx, acl.Lock, k); err != nil {
			return nil, err
		}
	}
	ttl, err := parseDuration("ttl", req.TTL, client.DefaultTTL, client.MinTTL, client.MaxTTL)
	if err != nil {
		return nil, err
	}
	wait, err := parseDuration("wait", req.Wait, 0, 0, client.MaxWait)
	if err != nil {
		return nil, err
	}
	gs, err := s.node.AcquireMulti(ctx, cluster.AcquireMultiArgs{Keys: req.Keys, Holder: req.Holder, TTL: ttl, Wait: wait, RequestID: req.RequestID, Owner: ownerOf(ctx)})
	if err != nil {
		return nil, err
	}
	out := client.MultiGrant{Grants: make([]client.Grant, len(gs))}
	for i, g := range gs {
		out.Grants[i] = grantOf(g.KeyState, g.Renewed)
		out.Grants[i].Proof = s.proofOf(g.KeyState)
	}
	return out, nil
}

// grantRefs checks the grants a set's release or renewal names: 1 to
// client.MaxMultiKeys, on distinct valid keys, each with a token, each key
// one the identity may lock (so no route touches a key its ACL keeps from
// the caller), after the holder and request id the request names. Bad
// input is a 400 naming the field.
func (s *Server) grantRefs(ctx context.Context, holder, requestID string, refs []client.GrantRef) ([]fsm.ReleaseKey, error) {
	if err := firstOf(checkName("holder", holder, client.MaxHolderLen, true), checkName("request_id", requestID, client.MaxRequestIDLen, false)); err != nil {
		return nil, err
	}
	if len(refs) == 0 || len(refs) > client.MaxMultiKeys {
		return nil, fmt.Errorf("%w: keys must name 1 to %d grants, not %d", cluster.ErrBadRequest, client.MaxMultiKeys, len(refs))
	}
	seen := make(map[string]bool, len(refs))
	out := make([]fsm.ReleaseKey, len(refs))
	for i, r := range refs {
		if err := checkName("keys[].key", r.Key, client.MaxKeyLen, true); err != nil {
			return nil, err
		}
		if seen[r.Key] {
			return nil, fmt.Errorf("%w: keys names %q twice", cluster.ErrBadRequest, r.Key)
		}
		seen[r.Key] = true
		if r.Token == 0 {
			return nil, fmt.Errorf("%w: keys[].token is required (key %q)", fence.ErrMalformed, r.Key)
		}
		out[i] = fsm.ReleaseKey{Key: r.Key, Token: r.Token}
	}
	for _, r := range refs {
		if err := s.may(ctx, acl.Lock, r.Key); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// releaseMulti ends a holder's set of grants in one log entry, or none
// (POST /v1/release/multi).
func (s *Server) releaseMulti(ctx context.Context, body []byte, _ *http.Request) (any, error) {
	var req client.ReleaseMultiRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	keys, err := s.grantRefs(ctx, req.Holder, req.RequestID, req.Keys)
	if err != nil {
		return nil, err
	}
	ended, err := s.node.ReleaseMulti(ctx, cluster.ReleaseMultiArgs{Keys: keys, Holder: req.Holder, RequestID: req.RequestID})
	if err != nil {
		return nil, err
	}
	out := client.ReleaseMultiResponse{Released: make([]client.ReleaseResponse, len(ended))}
	for i, k := range ended {
		out.Released[i] = client.ReleaseResponse{Key: k.Key, Token: k.Token, Holder: k.Holder, State: k.State.String()}
	}
	return out, nil
}

// renewMulti renews every lease of a holder's set of grants after one
// proof of leadership, or none (POST /v1/renew/multi).
func (s *Server) renewMulti(ctx context.Context, body []byte, _ *http.Request) (any, error) {
	var req client.RenewMultiRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	keys, err := s.grantRefs(ctx, req.Holder, req.RequestID, req.Keys)
	if err != nil {
		return nil, err
	}
	ls, err := s.node.RenewMulti(ctx, req.Holder, keys)
	if err != nil {
		return nil, err
	}
	out := client.RenewMultiResponse{Renewed: make([]client.RenewResponse, len(ls))}
	for i, l := range ls {
		k := l.Key
		out.Renewed[i] = client.RenewResponse{Key: k.Key, Holder: k.Holder, Token: k.Token, TTL: k.TTL.String(), Proof: s.proofOf(k)}
	}
	return out, nil
}
