package raft

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// stuckPipeline is a pipeline whose in-flight window is full: a send blocks
// until the pipeline is closed, as netPipeline.AppendEntries does when its
// decoder no longer takes answers.
type stuckPipeline struct {
	sending chan struct{}
	closed  chan struct{}
	once    sync.Once
	done    chan AppendFuture
}

func (p *stuckPipeline) AppendEntries(*AppendEntriesRequest, *AppendEntriesResponse) (AppendFuture, error) {
	p.sending <- struct{}{}
	<-p.closed
	return nil, ErrPipelineShutdown
}

func (p *stuckPipeline) Consumer() <-chan AppendFuture { return p.done }

func (p *stuckPipeline) Close() error {
	p.once.Do(func() { close(p.closed) })
	return nil
}

// staleAnswer is an answer from a follower in a newer term.
type staleAnswer struct{ deferError }

func (staleAnswer) Start() time.Time                 { return time.Now() }
func (staleAnswer) Request() *AppendEntriesRequest   { return &AppendEntriesRequest{Term: 1} }
func (staleAnswer) Response() *AppendEntriesResponse { return &AppendEntriesResponse{Term: 2} }

type pipeTransport struct {
	*InmemTransport
	p AppendPipeline
}

func (t *pipeTransport) AppendEntriesPipeline(ServerID, ServerAddress) (AppendPipeline, error) {
	return t.p, nil
}

// TestPipelineReplicateEndsWhenDecoderStops: when the pipeline's decoder
// stops (a follower answered from a newer term) while a send waits for room
// in the full pipeline, pipelineReplicate still returns. Upstream the send
// waited forever: nothing read the pipeline's answers any more and the
// pipeline was closed only after the send loop, so the replication goroutine
// never ended and Raft.Shutdown never returned (also seen by others as a
// follower that stops receiving entries while heartbeats go on).
func TestPipelineReplicateEndsWhenDecoderStops(t *testing.T) {
	_, inmem := NewInmemTransport("")
	p := &stuckPipeline{sending: make(chan struct{}, 1), closed: make(chan struct{}), done: make(chan AppendFuture, 1)}
	conf := DefaultConfig()
	conf.CommitTimeout = time.Hour // sends come only from the trigger
	r := &Raft{
		trans:      &pipeTransport{InmemTransport: inmem, p: p},
		logger:     hclog.NewNullLogger(),
		logs:       NewInmemStore(),
		shutdownCh: make(chan struct{}),
	}
	r.conf.Store(*conf)
	s := &followerReplication{
		peer:                Server{ID: "f", Address: "f"},
		currentTerm:         1,
		nextIndex:           1,
		stopCh:              make(chan uint64, 1),
		triggerCh:           make(chan struct{}, 1),
		triggerDeferErrorCh: make(chan *deferError, 1),
		notifyCh:            make(chan struct{}, 1),
		notify:              make(map[*verifyFuture]struct{}),
		stepDown:            make(chan struct{}, 1),
	}
	s.triggerCh <- struct{}{}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_ = r.pipelineReplicate(s)
	}()
	select {
	case <-p.sending: // the send waits for room in the pipeline
	case <-time.After(10 * time.Second):
		t.Fatal("pipelineReplicate never sent")
	}
	p.done <- &staleAnswer{} // the decoder reads it and stops
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("pipelineReplicate did not return after its decoder stopped while a send waited: the replication goroutine, and Raft.Shutdown, would wait forever")
	}
	close(r.shutdownCh)
}
