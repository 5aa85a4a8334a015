package raft

// Local patch (see PATCHES.md): a pipeline send that waits for room in a
// full pipeline returns once the pipeline's decoder has stopped or Raft shuts
// down.
//
// Upstream, pipelineDecode returns when a follower answers from a newer term
// (or fails an append), and after that nothing reads the pipeline's answers:
// the transport's decoder waits to hand one over, the in-flight window fills,
// and the next pipelineSend blocks in AppendEntries. The pipeline was closed,
// which is what unblocks that send, only by pipelineReplicate's deferred
// Close, after its send loop: the replication goroutine never ended, so
// neither did Raft.Shutdown, and a follower could stop receiving entries
// while its heartbeats went on.

// closePipelineWhenDone closes p once the decoder has finished or Raft shuts
// down, so that a send blocked on p returns; it returns without closing p
// when the send loop ended by itself (stopCh), which closes p anyway.
func closePipelineWhenDone(p AppendPipeline, finishCh, stopCh, shutdownCh <-chan struct{}) {
	select {
	case <-finishCh:
	case <-shutdownCh:
	case <-stopCh:
		return
	}
	_ = p.Close()
}
