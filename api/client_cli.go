package api

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
