package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/fenced/fenced/client"
)

// postRetrying posts what attempt i returns to the endpoints in turn, as a
// plain HTTP client would (no retry logic of the Go client's), until a
// definite answer: what was not done (503, no connection) or may have been
// (504, an answer lost: the transport marked it ambiguous) is posted again.
// The answer of a 2xx goes into out. from, when not nil, is the index of the
// endpoint to start with, and is set to the one that answered last, as a
// careful script keeps the node that answered it rather than start each
// request at the head of its list.
func postRetrying(ctx context.Context, hc *http.Client, eps []string, from *int, att *attempts, path string, attempt func(i int) any, out any) error {
	backoff := 20 * time.Millisecond
	first := 0
	if from != nil {
		first = *from
	}
	for i := 0; ; i++ {
		at := (first + i) % len(eps)
		err := postOnce(ctx, hc, eps[at], path, attempt(i), out)
		var apiErr *client.Error
		answered := err == nil || errors.As(err, &apiErr)
		if from != nil && answered {
			*from = at
		}
		if err == nil {
			return nil
		}
		retry := isDial(err) || att.ambiguous.Load()
		if apiErr != nil {
			retry = apiErr.Code == "outcome_unknown" || apiErr.Status == http.StatusServiceUnavailable
		}
		if !retry || ctx.Err() != nil {
			if att.ambiguous.Load() {
				return fmt.Errorf("%w: %w", client.ErrUnknownOutcome, err)
			}
			return err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// postOnce sends one request to one endpoint, with no retry.
func postOnce(ctx context.Context, hc *http.Client, ep, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ep+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &client.Error{Status: resp.StatusCode}
		if json.Unmarshal(data, &e.ErrorResponse) != nil || e.Code == "" {
			e.Code, e.Message = fmt.Sprintf("http_%d", resp.StatusCode), string(data)
		}
		return e
	}
	return json.Unmarshal(data, out)
}

func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// rawHTTP returns the worker's plain HTTP client: one deadline per attempt,
// as a careful script would set, and its connections kept.
func (c *worker) rawHTTP() *http.Client {
	if c.raw == nil {
		c.raw = c.w.httpClient()
		c.raw.Timeout = c.w.cfg.AttemptTimeout
		if c.raw.Timeout <= 0 {
			c.raw.Timeout = client.DefaultAttemptTimeout
		}
	}
	return c.raw
}
