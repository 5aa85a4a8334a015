package cluster

import (
	"context"
	"fmt"

	"github.com/fenced/fenced/metrics"
)

// How a verify proves that the state it read was the latest any leader
// served. With VerifyByContact (the default) it rests on a recent quorum
// contact, as a renewal does (renewal.go):
//
//   - The leader reads the applied state at r, after the verify arrived and
//     after it applied its commit index of that moment.
//   - It then checks, at c >= r, that a quorum accepted a heartbeat it sent
//     at h with c - h <= renewWindow.
//   - Every newer leader was elected after h and answers nothing until
//     takeoverWait after it learned it leads: after h + takeoverWait > c >= r.
//
// So every operation answered before the verify arrived was answered by this
// leader, which applied it before answering, or by an older one, whose
// entries this leader applied before it became ready: the state at r holds
// them all, and no newer leader has answered anything yet. The verdict is
// taken at r, inside the request's interval: linearizable, resting on clocks
// only as leases and renewals already do. Reading before checking matters:
// a leader paused between a check and a later read could read after a newer
// leader served. When the contact is too old (or no suspend-aware clock
// exists), the verify takes a confirmation round of its own and reads again.
//
// VerifyByRound always takes the round, resting on no clock: a heartbeat
// quorum asked for after the verify arrived (confirm.go).

// Verify confirmation modes (Config.VerifyConfirm).
const (
	// VerifyByContact rests a verify on a heartbeat a quorum accepted
	// within renewWindow when there is one, else on a round (the default).
	VerifyByContact = "contact"
	// VerifyByRound gives every verify a confirmation round of its own.
	VerifyByRound = "round"
)

// The two counters of VerifyConfirms, resolved once: verifies are hot.
var (
	verifiesByContact = metrics.VerifyConfirms.WithLabelValues("recent_quorum")
	verifiesByRound   = metrics.VerifyConfirms.WithLabelValues("round")
)

// checkVerifyConfirm validates Config.VerifyConfirm ("" is the default).
func checkVerifyConfirm(mode string) error {
	switch mode {
	case "", VerifyByContact, VerifyByRound:
		return nil
	}
	return fmt.Errorf("%w: verify confirmation %q is neither %q nor %q", ErrBadRequest, mode, VerifyByContact, VerifyByRound)
}

// verifyRead runs read on the applied state at a moment this node can prove
// was the latest any leader served (see above); read may run twice, and only
// its last run counts. An error means nothing could be proven.
func (n *Node) verifyRead(ctx context.Context, read func()) error {
	if n.cfg.VerifyConfirm != VerifyByRound && contactClock != nil {
		ok, err := n.readOnContact(ctx, read)
		if err != nil {
			return err
		}
		if ok {
			verifiesByContact.Inc()
			return nil
		}
	}
	verifiesByRound.Inc()
	if err := n.linearizable(ctx); err != nil {
		return err
	}
	read()
	return nil
}

// readOnContact reads, then reports whether a recent quorum contact proves
// the read current; false asks for a round. It does not ask about the contact
// before the read as well: only the check after it counts, a contact too old
// is rare (a leader cut off from its quorum), and each check reads
// CLOCK_BOOTTIME, a system call that Go's vDSO does not cover.
func (n *Node) readOnContact(ctx context.Context, read func()) (bool, error) {
	gen, err := n.requireReady()
	if err != nil {
		return false, err
	}
	if err := n.fsm.WaitApplied(ctx, n.r().CommitIndex()); err != nil {
		return false, err
	}
	read()
	if h := n.hook().readOnContact; h != nil {
		h()
	}
	return recentQuorum(n.r()) && n.ready.Load() == gen, nil
}
