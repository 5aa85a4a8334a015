package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Transfer hands leadership to the member id, or to the most up-to-date
// voter when id is empty, and returns the new leader's id.
func (c *Client) Transfer(ctx context.Context, id string) (string, error) {
	var out map[string]string
	if err := c.do(ctx, http.MethodPost, "/v1/cluster/transfer", TransferRequest{ID: id}, &out, true); err != nil {
		return "", err
	}
	return out["leader"], nil
}

// Backup takes a consistent backup of the cluster's state through any node.
// Each node gets the attempt timeout (four times it: the node makes the
// backup before it answers) to start answering, so a frozen node is left for
// the next; the body itself is read under the caller's deadline alone, since
// a large state takes a while to send.
func (c *Client) Backup(ctx context.Context) ([]byte, BackupMeta, error) {
	var meta BackupMeta
	fails := newFailures()
	for _, ep := range c.order() {
		data, m, err := c.backupFrom(ctx, ep)
		if err == nil {
			c.markAnswered(ep)
			return data, m, nil
		}
		fails.record(ep, classify(err, 4*c.attemptTimeout, ctx.Err() != nil))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, meta, fails.err(ErrUnavailable, "no node sent a backup", ctx.Err())
}

func (c *Client) backupFrom(ctx context.Context, ep string) ([]byte, BackupMeta, error) {
	var meta BackupMeta
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, ep+"/v1/snapshot", nil)
	if err != nil {
		return nil, meta, err
	}
	late := time.AfterFunc(4*c.attemptTimeout, cancel)
	resp, err := c.roundTrip(req)
	if !late.Stop() && err == nil {
		resp.Body.Close()
		err = context.DeadlineExceeded
	}
	if err != nil {
		if ctx.Err() == nil && actx.Err() != nil {
			c.markSuspect(ep)
			err = fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
		}
		return nil, meta, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, meta, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, meta, errorOf(resp.StatusCode, data)
	}
	if err := json.Unmarshal([]byte(resp.Header.Get(BackupMetaHeader)), &meta); err != nil {
		return nil, meta, fmt.Errorf("backup metadata: %w", err)
	}
	return data, meta, nil
}

// Restore replaces the cluster's state with a backup. aboveEpoch, when not
// zero, is the highest epoch the operator attests the old cluster issued;
// margin overrides the default margin added for a backup of another cluster.
// A restore is not retried once sent: its outcome is reported as it is. It is
// sent only to a node that answered a status probe within the attempt
// timeout just before, so a frozen node is passed over without doubt.
func (c *Client) Restore(ctx context.Context, backup []byte, aboveEpoch, margin uint64) (*RestoreResult, error) {
	q := url.Values{}
	if aboveEpoch > 0 {
		q.Set("above_epoch", strconv.FormatUint(aboveEpoch, 10))
	}
	if margin > 0 {
		q.Set("margin", strconv.FormatUint(margin, 10))
	}
	fails := newFailures()
	for _, ep := range c.order() {
		if err := c.probe(ctx, ep); err != nil {
			fails.record(ep, classify(err, c.attemptTimeout, ctx.Err() != nil))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep+"/v1/snapshot/restore?"+q.Encode(), bytes.NewReader(backup))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := c.roundTrip(req)
		if err != nil {
			// Only a request that never left may go to another node: one
			// that was sent may have been applied.
			if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
				fails.record(ep, classify(err, c.attemptTimeout, ctx.Err() != nil))
				continue
			}
			return nil, fmt.Errorf("%w: %v", ErrUnknownOutcome, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, errorOf(resp.StatusCode, data)
		}
		var out RestoreResult
		if err := json.Unmarshal(data, &out); err != nil {
			return nil, err
		}
		return &out, nil
	}
	return nil, fails.err(ErrUnavailable, "no node answered before the restore could be sent", ctx.Err())
}

// probe asks one node for its status within the attempt timeout.
func (c *Client) probe(ctx context.Context, ep string) error {
	pctx, cancel := context.WithTimeout(ctx, c.attemptTimeout)
	defer cancel()
	_, err := c.NodeStatus(pctx, ep)
	if err != nil && ctx.Err() == nil && pctx.Err() != nil {
		c.markSuspect(ep)
	} else if err == nil {
		c.markAnswered(ep)
	}
	return err
}

func errorOf(status int, data []byte) *Error {
	e := &Error{Status: status}
	if json.Unmarshal(data, &e.ErrorResponse) != nil || e.Code == "" {
		e.Code, e.Message = "http_"+strconv.Itoa(status), string(bytes.TrimSpace(data))
	}
	return e
}

// ACLCheck asks a node whether its key ACL lets an identity exercise a
// right (lock, read, verify) on a key, and which rule decides (admin).
// Nodes answer for their own file; fencectl status flags nodes whose files
// differ.
func (c *Client) ACLCheck(ctx context.Context, req ACLCheckRequest) (*ACLCheckResponse, error) {
	var out ACLCheckResponse
	if err := c.do(ctx, http.MethodPost, "/v1/acl/check", req, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// SigningKeys returns the cluster's public signing keys (GET
// /v1/signing-keys): a JWKS a resource pins to check grants' proofs
// offline (fence/proof.ParseJWKS reads its JSON), with the cluster's ID.
func (c *Client) SigningKeys(ctx context.Context) (*SigningKeys, error) {
	var out SigningKeys
	if err := c.do(ctx, http.MethodGet, "/v1/signing-keys", nil, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// RotateSigningKey gives the leader a new signing key; its replaced key
// stays published for overlap ("" for 24h). Admin only.
func (c *Client) RotateSigningKey(ctx context.Context, overlap string) (*RotateKeyResponse, error) {
	var out RotateKeyResponse
	if err := c.do(ctx, http.MethodPost, "/v1/signing-keys/rotate", RotateKeyRequest{Overlap: overlap}, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}
