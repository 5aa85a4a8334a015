package cluster

import (
	"errors"

	wal "github.com/hashicorp/raft-wal"

	"github.com/fenced/fenced/metrics"
)

// ErrStoreFailed: an fsync of the Raft log failed and the node stopped. What
// the failed fsync covered may or may not be on disk, and a later fsync's
// success would prove nothing about it (the kernel may have dropped the dirty
// pages), so the node never retries as if it were durable: it stops serving,
// voting and replicating, and a restart recovers from what is really on disk.
var ErrStoreFailed = errors.New("raft log store failed an fsync: node stopped, restart it")

// isSyncFailure reports whether a log store error says an fsync failed.
func isSyncFailure(err error) bool { return err != nil && errors.Is(err, wal.ErrSyncFailed) }

// failClosed stops the node after its log store failed an fsync. It is called
// from raft's own goroutines (a log write), so raft is shut down on another.
// Failed is closed once the node has stopped; the server exits then.
func (n *Node) failClosed(err error) {
	n.failOnce.Do(func() {
		n.failErr = errors.Join(ErrStoreFailed, err)
		metrics.LogStoreFailed.Set(1)
		n.log.Error("fsync of the raft log failed: the node stops (it does not retry a failed fsync); restart it to recover from what is on disk", "error", err)
		go func() {
			n.revoke()
			_ = n.shutdownRaft()
			close(n.failed)
		}()
	})
}

// Failed is closed when the node stopped because its log store failed an
// fsync (Err says why). The server exits then; a restart recovers.
func (n *Node) Failed() <-chan struct{} { return n.failed }

// Err returns why the node stopped on its own (ErrStoreFailed), or nil.
func (n *Node) Err() error {
	select {
	case <-n.failed:
		return n.failErr
	default:
		return nil
	}
}
