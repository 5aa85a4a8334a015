package api

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
func (c *Client) Backup(ctx context.Context) ([]byte, BackupMeta, error) {
	var meta BackupMeta
	var lastErr error
	for _, ep := range c.endpoints {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep+"/v1/snapshot", nil)
		if err != nil {
			return nil, meta, err
		}
		c.authorize(req)
		resp, err := c.hc.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			lastErr = err
			continue
		}
		if resp.StatusCode != http.StatusOK {
			lastErr = errorOf(resp.StatusCode, data)
			continue
		}
		if err := json.Unmarshal([]byte(resp.Header.Get(BackupMetaHeader)), &meta); err != nil {
			return nil, meta, fmt.Errorf("backup metadata: %w", err)
		}
		return data, meta, nil
	}
	return nil, meta, fmt.Errorf("%w: %v", ErrUnavailable, lastErr)
}

// Restore replaces the cluster's state with a backup. aboveEpoch, when not
// zero, is the highest epoch the operator attests the old cluster issued;
// margin overrides the default margin added for a backup of another cluster.
// A restore is not retried: its outcome is reported as it is.
func (c *Client) Restore(ctx context.Context, backup []byte, aboveEpoch, margin uint64) (*RestoreResult, error) {
	q := url.Values{}
	if aboveEpoch > 0 {
		q.Set("above_epoch", strconv.FormatUint(aboveEpoch, 10))
	}
	if margin > 0 {
		q.Set("margin", strconv.FormatUint(margin, 10))
	}
	var lastErr error
	for _, ep := range c.endpoints {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep+"/v1/snapshot/restore?"+q.Encode(), bytes.NewReader(backup))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		c.authorize(req)
		resp, err := c.hc.Do(req)
		if err != nil {
			// Only a request that never left may go to another node: one
			// that was sent may have been applied.
			if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
				lastErr = err
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
	return nil, fmt.Errorf("%w: %v", ErrUnavailable, lastErr)
}

func (c *Client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

func errorOf(status int, data []byte) *Error {
	e := &Error{Status: status}
	if json.Unmarshal(data, &e.ErrorResponse) != nil || e.Code == "" {
		e.Code, e.Message = "http_"+strconv.Itoa(status), string(bytes.TrimSpace(data))
	}
	return e
}
