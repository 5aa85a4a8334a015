package cluster

import "github.com/fenced/fenced/fsm"

// hooks are seams for tests: each runs at one point of a race window, so a
// test can make the window happen every time instead of hoping for it. All
// are nil in production.
type hooks struct {
	// beforeReady runs in establish just before the generation is made ready.
	beforeReady func(gen uint64)
	// claimed runs in Release after a waiter was claimed for a handoff and
	// before the release is proposed.
	claimed func(key string)
	// woken runs in a waiting acquire after it was woken, before it tries again.
	woken func(key string)
	// ended runs when the FSM reports an ended grant, before the leader's
	// lease table hears of it.
	ended func(k fsm.KeyState)
	// proposing runs in tryAcquire just before the acquire is proposed.
	proposing func(a AcquireArgs)
	// readOnContact runs in readOnContact after the verify read the state
	// and before it checks the quorum contact again.
	readOnContact func()
}

var noHooks hooks

// hook returns the node's test hooks; none in production.
func (n *Node) hook() *hooks {
	if h := n.testHooks.Load(); h != nil {
		return h
	}
	return &noHooks
}
