package roundlease

import (
	"context"
	"testing"
)

func TestStaticIsRoundOne(t *testing.T) {
	l, err := Static{Owner: "dev"}.Acquire(context.Background(), "k")
	if err != nil || l != (Lease{Key: "k", Owner: "dev", Round: 1}) {
		t.Fatalf("Static.Acquire = %+v, %v; want round 1", l, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if l, err := (Static{Owner: "dev"}).Acquire(ctx, "k"); err == nil || l != (Lease{}) {
		t.Fatalf("Static.Acquire with an ended context = %+v, %v; want an error", l, err)
	}
}
