package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/internal/testutil"
)

// A permit and a shared grant take a lock-delay over HTTP (it was 400):
// after the permit expires, its slot is kept (409 lock_delay with
// retry_after for a third holder of a limit-2 semaphore, the key's read
// listing the delayed slot), and after a reader expires an exclusive
// acquire is kept out while another reader gets in. Every exchange is
// checked against the OpenAPI document.
func TestLockDelayOfPermitsOverHTTP(t *testing.T) {
	nodes := startCluster(t, 3)
	lead, _ := leaderOf(t, nodes)
	k := newContract(t)
	k.do(lead.url, contractCall{method: "POST", path: "/v1/acquire", status: http.StatusOK,
		body: `{"key":"s","holder":"a","ttl":"100ms","limit":2,"lock_delay":"5s"}`})
	k.do(lead.url, contractCall{method: "POST", path: "/v1/acquire", status: http.StatusOK,
		body: `{"key":"s","holder":"b","ttl":"1m","limit":2}`})
	var ki client.KeyInfo
	testutil.Eventually(t, 20*time.Second, func() error {
		data := k.do(lead.url, contractCall{method: "GET", path: "/v1/keys/s", status: http.StatusOK})
		ki = client.KeyInfo{}
		if err := json.Unmarshal(data, &ki); err != nil {
			return err
		}
		if len(ki.Delayed) != 1 || ki.Live != 1 {
			return errors.New("a's permit has not expired yet: " + string(data))
		}
		return nil
	})
	if d := ki.Delayed[0]; d.Holder != "a" || d.State != "expired" || d.LockDelay != "5s" || d.LockDelayRemaining == "" {
		t.Fatalf("delayed slot %+v", d)
	}
	data := k.do(lead.url, contractCall{method: "POST", path: "/v1/acquire", status: http.StatusConflict, code: "lock_delay",
		body: `{"key":"s","holder":"c","ttl":"1m","limit":2}`})
	var er client.ErrorResponse
	if err := json.Unmarshal(data, &er); err != nil || er.RetryAfter == "" {
		t.Fatalf("no retry_after: %s", data)
	}

	k.do(lead.url, contractCall{method: "POST", path: "/v1/acquire", status: http.StatusOK,
		body: `{"key":"rw","holder":"r1","ttl":"100ms","mode":"shared","lock_delay":"5s"}`})
	testutil.Eventually(t, 20*time.Second, func() error {
		data := k.do(lead.url, contractCall{method: "GET", path: "/v1/keys/rw", status: http.StatusOK})
		ki = client.KeyInfo{}
		if err := json.Unmarshal(data, &ki); err != nil {
			return err
		}
		if len(ki.Delayed) != 1 || ki.Delayed[0].Mode != client.ModeShared {
			return errors.New("r1's grant has not expired yet: " + string(data))
		}
		return nil
	})
	k.do(lead.url, contractCall{method: "POST", path: "/v1/acquire", status: http.StatusConflict, code: "lock_delay",
		body: `{"key":"rw","holder":"w","ttl":"1m"}`})
	k.do(lead.url, contractCall{method: "POST", path: "/v1/acquire", status: http.StatusOK,
		body: `{"key":"rw","holder":"r2","ttl":"1m","mode":"shared"}`})
}
