package cluster

import (
	"context"

	"github.com/fenced/fenced/fence"
)

// VerifyCheck is one check of a verify batch: is Token the current live
// grant of Key (and of Holder, when not empty)?
type VerifyCheck struct {
	Key    string
	Token  fence.Token
	Holder string
}

// VerifyBatch answers many checks with one linearizable read (verifyRead:
// one proof of leadership, a recent quorum contact or a round, taken after
// the batch arrived), every check judged against the applied state exactly
// as Verify judges it. Each check was asked for before the batch arrived
// and is answered after the read, so each verdict is taken at a point
// inside its own request's interval: as linearizable as a Verify of its own.
//
// It fails closed and as a whole: when no proof is had, every verdict is a
// refusal with the reason unavailable and the error says why, as Verify
// says it for one check.
func (n *Node) VerifyBatch(ctx context.Context, checks []VerifyCheck) ([]Verdict, error) {
	out := make([]Verdict, len(checks))
	err := n.verifyRead(ctx, func() {
		for i, c := range checks {
			out[i] = n.judge(c.Key, c.Token, c.Holder)
		}
	})
	if err != nil {
		for i := range out {
			out[i] = Verdict{Reason: ReasonUnavailable}
		}
	}
	for _, v := range out {
		countVerdict(v)
	}
	return out, err
}

// KeepaliveBatch renews the live leases of many holders on one proof of
// leadership (a recent quorum contact or a confirmation round, as Keepalive
// takes it), obtained after the batch arrived. out[i] are the leases of
// holders[i]. When leadership cannot be proven nothing is renewed and the
// error is the one Keepalive would return.
func (n *Node) KeepaliveBatch(ctx context.Context, holders []string, may func(key string) bool) ([][]RenewedLease, error) {
	if err := n.confirmRenewal(ctx); err != nil {
		return nil, err
	}
	out := make([][]RenewedLease, len(holders))
	for i, h := range holders {
		ls, err := n.renewHolder(h, may)
		if err != nil {
			return nil, err
		}
		out[i] = ls
	}
	return out, nil
}
