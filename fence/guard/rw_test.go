package guard

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/fenced/fenced/fence"
)

func rwTok(t *testing.T, seq uint64) fence.Token {
	tok, err := fence.Compose(2, seq)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// The order fenced grants a readers-writer key in, and what the guard
// admits at each step.
func TestRWAdmitsByGrantOrder(t *testing.T) {
	g, ctx := NewRW(), context.Background()
	steps := []struct {
		write bool
		seq   uint64
		ok    bool
	}{
		{false, 1, true},  // reader 1
		{false, 2, true},  // reader 2, beside reader 1
		{false, 1, true},  // reader 1 again: readers do not refuse each other
		{true, 3, true},   // a writer after both readers ended
		{false, 2, false}, // reader 2, paused, wakes after the writer: refused
		{true, 3, true},   // the writer writes again
		{false, 4, true},  // a reader after the writer ended
		{true, 3, false},  // the writer, paused, wakes after that reader: refused
		{true, 5, true},   // the next writer
		{false, 4, false}, // the reader, paused past the next writer: refused
	}
	for i, s := range steps {
		var err error
		if s.write {
			err = g.AdmitWrite(ctx, "k", rwTok(t, s.seq), nil)
		} else {
			err = g.AdmitRead(ctx, "k", rwTok(t, s.seq), nil)
		}
		if s.ok && err != nil || !s.ok && !errors.Is(err, ErrStale) {
			t.Fatalf("step %d (write %v, seq %d): %v", i, s.write, s.seq, err)
		}
	}
	if w, a, err := g.Highest(ctx, "k"); err != nil || w != rwTok(t, 5) || a != rwTok(t, 5) {
		t.Fatalf("highest %v %v %v", w, a, err)
	}
	if err := g.AdmitRead(ctx, "k", 0, nil); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("zero token: %v", err)
	}
}

// A write never runs while a read of the key runs, and reads overlap.
func TestRWWritesRunAlone(t *testing.T) {
	g, ctx := NewRW(), context.Background()
	var mu sync.Mutex
	readers, writing, overlapped := 0, false, false
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(2)
		go func(seq uint64) {
			defer wg.Done()
			_ = g.AdmitRead(ctx, "k", rwTok(t, 1000+seq), func() error {
				mu.Lock()
				readers++
				if writing {
					overlapped = true
				}
				mu.Unlock()
				mu.Lock()
				readers--
				mu.Unlock()
				return nil
			})
		}(uint64(i))
		go func(seq uint64) {
			defer wg.Done()
			_ = g.AdmitWrite(ctx, "k", rwTok(t, 2000+seq), func() error {
				mu.Lock()
				writing = true
				if readers > 0 {
					overlapped = true
				}
				mu.Unlock()
				mu.Lock()
				writing = false
				mu.Unlock()
				return nil
			})
		}(uint64(i))
	}
	wg.Wait()
	if overlapped {
		t.Fatal("a write ran beside a read")
	}
}
