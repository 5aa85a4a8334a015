package main

import (
	"strings"
	"testing"
)

func TestHealth(t *testing.T) {
	t.Parallel()
	cl := shared.get(t)
	ep := cl.Endpoints()[0]
	if code, out, errOut := runCtl(t, nil, "--endpoints", ep, "health"); code != 0 || !strings.Contains(out, "is ready") {
		t.Fatalf("ready node: %d %s %s", code, out, errOut)
	}
	if code, out, _ := runCtl(t, nil, "--endpoints", ep, "-o", "json", "health", "--live"); code != 0 || !strings.Contains(out, `"live": true`) {
		t.Fatalf("live node: %d %s", code, out)
	}
	if code, _, errOut := runCtl(t, nil, "--endpoints", "127.0.0.1:1", "--timeout", "500ms", "health"); code != 1 || errOut == "" {
		t.Fatalf("unreachable node: %d %s", code, errOut)
	}
}
