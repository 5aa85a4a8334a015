package nemesis

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

// FlapLeaders is the nemesis that hands leadership on every 1–2 s while a
// holder that took a key stops renewing it: every new leader re-arms the
// leases it finds, and the dead holder's key must still expire within its
// TTL plus the stated bound (checker.LeaseBound), however often the
// leader changes. With a full re-arm at every election (fenced's
// --unsafe-lease-rearm-full, a chaos build's) the key is kept for as long
// as the flapping lasts.
const FlapLeaders = "flap-leaders"

// Extra lists the nemeses that are not in the default schedule (all):
// they are asked for by name.
var Extra = []string{FlapLeaders}

// Known lists every nemesis that can be asked for.
func Known() []string { return append(append([]string(nil), All...), Extra...) }

// FlapPrefix names the dead holder's keys: their operations are checked by
// checker.LeaseBound alone.
const FlapPrefix = "jepsen/flap/"

// DeadHolderClient is the client id of the dead holder's operations.
const DeadHolderClient = 9001

// LeaseEnd is the kind of the dead holder's observation that its grant
// ended: Invoke is the time it was first seen ended, Token the grant.
const LeaseEnd = "lease-end"

func (e *Env) flapLeaders(ctx context.Context) error {
	c := client.New(e.B.Endpoints(), client.WithHTTPClient(&http.Client{Timeout: 2 * time.Second}))
	key := fmt.Sprintf("%sk%d", FlapPrefix, e.Rng.Intn(1<<20))
	// The flapping lasts past the bound, so a key kept across elections
	// shows as kept to the end.
	span := max(e.Hold, 4*e.TTL+5*time.Second)
	f := e.Rec.BeginFault(FlapLeaders, nil, fmt.Sprintf("leadership handed on every 1-2s for %v; a holder of %s stops renewing", span, key))
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	op := e.Rec.Invoke(history.Op{Client: DeadHolderClient, Kind: history.Acquire, Key: key, Holder: "dead"})
	g, err := c.Acquire(gctx, client.AcquireRequest{Key: key, Holder: "dead", TTL: e.TTL.String()})
	cancel()
	e.Rec.Complete(op, func(o *history.Op) {
		if err != nil {
			o.Outcome, o.Error = history.Info, err.Error()
			return
		}
		o.Outcome, o.Granted = history.OK, g.Token
	})
	if err != nil {
		e.Rec.EndFault(f, "the dead holder's acquire failed: "+err.Error())
		return err
	}
	ended := make(chan struct{})
	go e.watchLeaseEnd(ctx, c, key, g.Token, ended)
	end := time.Now().Add(span)
	transfers := 0
	for time.Now().Before(end) && ctx.Err() == nil {
		pause := time.Second + time.Duration(e.Rng.Int63n(int64(time.Second)))
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := c.Transfer(tctx, ""); err == nil {
			transfers++
		}
		cancel()
	}
	select {
	case <-ended:
	default:
	}
	e.Rec.EndFault(f, fmt.Sprintf("%d leadership transfers", transfers))
	return nil
}

// watchLeaseEnd records when the dead holder's grant is first seen ended
// (a linearizable read every 100 ms): the key expired, or went to someone
// else after expiring.
func (e *Env) watchLeaseEnd(ctx context.Context, c *client.Client, key string, tok fence.Token, ended chan<- struct{}) {
	defer close(ended)
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		k, err := c.Key(rctx, key)
		cancel()
		if err == nil && (k.Token != tok || k.State != "held") {
			op := e.Rec.Invoke(history.Op{Client: DeadHolderClient, Kind: LeaseEnd, Key: key, Token: tok})
			e.Rec.Complete(op, func(o *history.Op) { o.Outcome, o.Code = history.OK, k.State })
			return
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}
