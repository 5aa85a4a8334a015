package resource

import (
	"sync"

	"github.com/fenced/fenced/fence"
)

// RW is the fenced resource of the readers-writer workload: per key, the
// highest token admitted for a write (an exclusive grant's) and the highest
// admitted at all, with fence/guard's RW rule. A read is admitted when its
// token is not below the highest write token (a later exclusive grant
// refuses every earlier reader); a write when its token is not below the
// highest token of any access (a later grant of either mode refuses an
// earlier writer). Every access is numbered, so the checker sees the
// resource's own order.
type RW struct {
	mu   sync.Mutex
	seq  int
	keys map[string]*rwRegister
}

type rwRegister struct {
	write, any fence.Token
	values     []int
}

// NewRW returns an empty readers-writer resource.
func NewRW() *RW { return &RW{keys: map[string]*rwRegister{}} }

func (r *RW) reg(key string) *rwRegister {
	reg := r.keys[key]
	if reg == nil {
		reg = &rwRegister{}
		r.keys[key] = reg
	}
	return reg
}

// Read admits tok, a shared grant's token, unless it is below the highest
// write token; High in the answer is that write token.
func (r *RW) Read(key string, tok fence.Token) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.reg(key)
	r.seq++
	if tok < reg.write {
		return Result{High: reg.write, Seq: r.seq}
	}
	reg.any = max(reg.any, tok)
	return Result{Accepted: true, High: reg.write, Values: append([]int(nil), reg.values...), Seq: r.seq}
}

// Write admits tok, an exclusive grant's token, unless it is below the
// highest token admitted for anything; High in the answer is that token.
func (r *RW) Write(key string, tok fence.Token, v int) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.reg(key)
	r.seq++
	if tok < reg.any {
		return Result{High: reg.any, Seq: r.seq}
	}
	reg.write, reg.any = tok, tok
	reg.values = append(reg.values, v)
	return Result{Accepted: true, High: reg.any, Seq: r.seq}
}

// Occupancy is the semaphore workload's shared resource: it counts the
// permit holders inside it at once, per key, as a pool of N workers
// guarded by a semaphore would.
type Occupancy struct {
	mu     sync.Mutex
	inside map[string]int
}

// NewOccupancy returns an empty occupancy counter.
func NewOccupancy() *Occupancy { return &Occupancy{inside: map[string]int{}} }

// Enter counts one more holder inside key and returns how many are inside.
func (o *Occupancy) Enter(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inside[key]++
	return o.inside[key]
}

// Leave counts one holder out of key.
func (o *Occupancy) Leave(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inside[key]--
}
