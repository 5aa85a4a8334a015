package api

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/cluster"
)

// limitField is how the limit appears in an acquire's body; a body without
// it is a lock's, and is not decoded a second time.
var limitField = []byte(`"limit"`)

// modeOf names a shared grant's mode on the wire; an exclusive grant (a
// lock) and a permit have none.
func modeOf(shared bool) string {
	if shared {
		return client.ModeShared
	}
	return ""
}

// checkLimit refuses an acquire's limit outside 1 to client.MaxLimit when
// the body names one (a limit of 0 given explicitly too: absence is how a
// lock is asked for), a mode other than exclusive and shared, and a mode
// with a limit. It names the field; nothing is changed. A permit or a
// shared grant may carry a lock-delay, as a lock may: its slot is kept
// for the delay after an expiry.
func checkLimit(body []byte, req client.AcquireRequest) error {
	switch req.Mode {
	case "", client.ModeExclusive, client.ModeShared:
	default:
		return fmt.Errorf("%w: mode must be %q or %q", cluster.ErrBadRequest, client.ModeExclusive, client.ModeShared)
	}
	if req.Limit == 0 {
		if !bytes.Contains(body, limitField) {
			return nil
		}
		var probe struct {
			Limit *int `json:"limit"`
		}
		if err := json.Unmarshal(body, &probe); err != nil || probe.Limit == nil {
			return nil // "limit" was text elsewhere in the body
		}
	}
	if req.Mode != "" {
		return fmt.Errorf("%w: mode cannot be given with limit: a semaphore's permits have no mode", cluster.ErrBadRequest)
	}
	if req.Limit < 1 || req.Limit > client.MaxLimit {
		return fmt.Errorf("%w: limit must be from 1 to %d (omit it for a lock)", cluster.ErrBadRequest, client.MaxLimit)
	}
	return nil
}
