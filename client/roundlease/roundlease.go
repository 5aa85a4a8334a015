// Package roundlease adapts fenced to the lease seam of code that elects a
// role per key and numbers its terms: Acquire(ctx, key) returns a Lease
// whose Round is the fenced token of the grant.
//
// The Round is monotone per key across all callers (fenced never issues a
// lower token for a key, across leader changes and restores), stable while
// the same owner renews (a renewal keeps the grant and its token), and
// strictly higher when the role changes hands (every grant gets a fresh,
// higher token). Any error means "do not write": Acquire fails closed,
// returning the zero Lease whenever it cannot prove the owner holds the key.
package roundlease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fenced/fenced/client"
)

// Lease is the role an owner holds on a key, and the round of that holding.
type Lease struct {
	Key   string
	Owner string
	// Round is the fenced token: compare Rounds as integers; a resource
	// refuses writes whose Round is lower than one it has seen.
	Round uint64
}

// Acquirer is the seam: it grants the role on key to its owner, or says why
// not. Declared here for callers; Fenced and Static implement it.
type Acquirer interface {
	Acquire(ctx context.Context, key string) (Lease, error)
}

// ErrNotHeld wraps every refusal of Acquire: the owner does not hold the key
// (someone else does, the lease was lost, the cluster could not be reached).
// Do not write.
var ErrNotHeld = errors.New("roundlease: role not held")

// Options tune a Fenced.
type Options struct {
	// TTL of each grant; client.DefaultTTL when zero. An owner that stops
	// renewing (crashed, frozen, partitioned) loses the role after it.
	TTL time.Duration
	// Wait blocks Acquire up to this long while another owner holds the
	// key; zero refuses at once.
	Wait time.Duration
}

// Fenced implements Acquirer over a fenced cluster for one owner (the
// fenced holder name). It keeps each key's grant alive in the background,
// so repeated Acquires of a key return the same Round until the grant is
// lost or released.
type Fenced struct {
	c     *client.Client
	owner string
	o     Options

	mu     sync.Mutex
	leases map[string]*client.Lease
}

// New returns the adapter for owner over client c.
func New(c *client.Client, owner string, o Options) *Fenced {
	return &Fenced{c: c, owner: owner, o: o, leases: map[string]*client.Lease{}}
}

var _ Acquirer = (*Fenced)(nil)

// Acquire returns the owner's Lease on key: the Round of its live grant,
// or of a new grant when it had none. It fails closed: an error (and the
// zero Lease) whenever the grant cannot be shown to be live now.
// Calls are serialized per adapter (a waiting acquire holds back the
// others); use one adapter per concurrent caller to wait in parallel.
func (f *Fenced) Acquire(ctx context.Context, key string) (Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.leases[key]; ok {
		if live(l) {
			return f.leaseOf(l), nil
		}
		delete(f.leases, key)
		// A lease lost to a network failure may still be the owner's
		// grant on the server: acquiring again as the same holder renews
		// it, and the Round stays the same.
	}
	l, err := f.c.Lease(ctx, key, f.owner, client.LeaseOptions{TTL: f.o.TTL, Wait: f.o.Wait})
	if err != nil {
		return Lease{}, fmt.Errorf("%w: %s for %s: %w", ErrNotHeld, key, f.owner, err)
	}
	f.leases[key] = l
	if !live(l) {
		return Lease{}, fmt.Errorf("%w: %s for %s: lease ended at once", ErrNotHeld, key, f.owner)
	}
	return f.leaseOf(l), nil
}

// live reports whether a lease is held now: not ended, before its deadline.
func live(l *client.Lease) bool {
	select {
	case <-l.Done():
		return false
	default:
	}
	return time.Now().Before(l.Deadline())
}

func (f *Fenced) leaseOf(l *client.Lease) Lease {
	return Lease{Key: l.Grant().Key, Owner: f.owner, Round: uint64(l.Token())}
}

// Release gives up the role on key; the next owner's Round is higher.
func (f *Fenced) Release(ctx context.Context, key string) error {
	f.mu.Lock()
	l, ok := f.leases[key]
	delete(f.leases, key)
	f.mu.Unlock()
	if !ok {
		return nil
	}
	return l.Release(ctx)
}

// Close releases every role the owner holds.
func (f *Fenced) Close(ctx context.Context) error {
	f.mu.Lock()
	keys := make([]string, 0, len(f.leases))
	for k := range f.leases {
		keys = append(keys, k)
	}
	f.mu.Unlock()
	var errs []error
	for _, k := range keys {
		errs = append(errs, f.Release(ctx, k))
	}
	return errors.Join(errs...)
}

// Static is the single-process Acquirer for local development: every key
// is held by Owner, always in round 1. It gives no protection between
// processes; use Fenced for that.
type Static struct{ Owner string }

var _ Acquirer = Static{}

// Acquire returns round 1 for any key.
func (s Static) Acquire(ctx context.Context, key string) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	return Lease{Key: key, Owner: s.Owner, Round: 1}, nil
}
