package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/fenced/fenced/acl"
	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
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
