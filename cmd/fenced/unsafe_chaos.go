//go:build chaos

package main

import "github.com/spf13/pflag"

// registerUnsafe adds, to a binary built with -tags chaos only, the flags
// that change how this node applies log entries: nodes that disagree on
// them diverge, so a production binary does not have them. The chaos
// suite's positive controls use them to prove its checkers fail.
func registerUnsafe(fs *pflag.FlagSet, o *options) {
	fs.BoolVar(&o.reclaimIgnoresEpoch, "unsafe-reclaim-ignores-epoch", false, "reclaim keys without the epoch rule, so tokens can go back (a positive control for the chaos suite only; same on every node)")
	fs.BoolVar(&o.leaseRearmFull, "unsafe-lease-rearm-full", false, "re-arm every lease for a full TTL at every election and renew without touches, so a dead holder keeps its key while leaders keep changing (a positive control for the chaos suite only; same on every node)")
	fs.Uint64Var(&o.maxSeq, "max-seq", 0, "lower the per-epoch grant limit per key (testing only; same on every node)")
	fs.IntVar(&o.walSegmentSize, "unsafe-wal-segment-size", 0, "size in bytes of the raft-wal segment files (default 64 MiB), so that tests on small file systems rotate segments and run out of space quickly (testing only)")
	fs.StringVar(&o.fsyncDelayFile, "unsafe-fsync-delay-file", "", "while this file (relative to the data dir) exists, every raft log fsync first waits the duration written in it: the chaos suite's slow disk (testing only)")
	fs.BoolVar(&o.ackUnwritten, "unsafe-ack-unwritten-log", false, "acknowledge raft log appends that failed (no space left, a failed fsync) as if they were on disk: the positive control of the chaos suite's disk nemesis, never for anything else")
}
