package client

import (
	"context"
	"net/http"
)

// NodeReady asks the node at endpoint whether it can serve requests: it leads
// and is ready, or it knows a leader to forward to. It does not retry on
// another node; nil means ready.
func (c *Client) NodeReady(ctx context.Context, endpoint string) error {
	_, err := c.once(ctx, endpoint, http.MethodGet, "/readyz", nil, nil)
	return err
}

// NodeLive asks the node at endpoint whether its process answers
// (GET /healthz), with no retry on another node; nil means live.
func (c *Client) NodeLive(ctx context.Context, endpoint string) error {
	_, err := c.once(ctx, endpoint, http.MethodGet, "/healthz", nil, nil)
	return err
}
