package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/cluster"
)

func TestKeyRetentionFlag(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil || o.keyRetention != cluster.DefaultKeyRetention || o.reclaimIgnoresEpoch {
		t.Fatalf("defaults: %v %v %v", o.keyRetention, o.reclaimIgnoresEpoch, err)
	}
	if o, err = parseFlags([]string{"--key-retention", "0"}); err != nil || o.keyRetention != 0 {
		t.Fatalf("--key-retention 0: %v %v", o.keyRetention, err)
	}
	if o, err = parseFlags([]string{"--key-retention", "90s"}); err != nil || o.keyRetention != 90*time.Second {
		t.Fatalf("--key-retention 90s: %v %v", o.keyRetention, err)
	}
	if _, err := parseFlags([]string{"--key-retention", "-1s"}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("negative retention: %v", err)
	}
}

// TestNoUnsafeApplyFlagsInProduction: the flags that make one node apply
// entries differently from the others (a cluster whose nodes differ
// diverges) are not in a production build.
func TestNoUnsafeApplyFlagsInProduction(t *testing.T) {
	for _, f := range []string{"--unsafe-reclaim-ignores-epoch", "--unsafe-lease-rearm-full", "--max-seq=5"} {
		if _, err := parseFlags([]string{f}); err == nil || !strings.Contains(err.Error(), "unknown flag") {
			t.Errorf("%s: %v; want an unknown flag", f, err)
		}
	}
}
