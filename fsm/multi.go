package fsm

import (
	"encoding/binary"
	"fmt"
	"time"
)

// typeAcquireMulti is the command type of AcquireMulti.
const typeAcquireMulti byte = 15

// MaxMultiKeys is the most keys one AcquireMulti names.
const MaxMultiKeys = 64

// AcquireMulti asks for several keys at once, for one holder, all or none,
// in one log entry: each key granted is a lock's grant of its own, with its
// own token from that key's sequence and the request id of the whole
// request, released, renewed and expired per key as any lock. If any key
// is held by another holder (or has live permits or shared grants), no key
// changes and the refusal names that key (the first such, in the request's
// order). A key the holder already holds is renewed (its token kept).
type AcquireMulti struct {
	Keys      []string
	Holder    string
	TTL       time.Duration
	RequestID string
}

func (c AcquireMulti) encode(b []byte) []byte {
	b = append(b, typeAcquireMulti, version1)
	b = binary.AppendUvarint(b, uint64(len(c.Keys)))
	for _, k := range c.Keys {
		b = appendString(b, k)
	}
	b = appendString(b, c.Holder)
	b = binary.AppendUvarint(b, uint64(c.TTL))
	return appendString(b, c.RequestID)
}

func (d *decoder) acquireMulti() AcquireMulti {
	var c AcquireMulti
	n := d.count(1)
	if n > 0 {
		c.Keys = make([]string, 0, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		c.Keys = append(c.Keys, d.str())
	}
	c.Holder, c.TTL, c.RequestID = d.str(), time.Duration(d.int64()), d.str()
	return c
}

// acquireMulti applies an AcquireMulti entry: every check is made on every
// key before any key changes, so the entry grants all or none.
func (f *FSM) acquireMulti(c AcquireMulti, pos logPos, notices []notice) (*Result, []notice) {
	seen := make(map[string]bool, len(c.Keys))
	valid := len(c.Keys) > 0 && len(c.Keys) <= MaxMultiKeys && c.Holder != "" && c.TTL >= time.Millisecond && c.TTL <= maxMs
	for _, k := range c.Keys {
		valid = valid && k != "" && !seen[k]
		seen[k] = true
	}
	if !valid {
		return &Result{Err: fmt.Errorf("%w: 1 to %d distinct keys, a holder and a ttl of 1ms to 49 days are required", ErrInvalid, MaxMultiKeys)}, notices
	}
	c.TTL = c.TTL.Truncate(time.Millisecond)
	f.tick(pos, true)
	lasts := make([]KeyState, len(c.Keys))
	exists := make([]bool, len(c.Keys))
	mine := 0 // keys whose live grant this request made
	known := false
	for i, key := range c.Keys {
		lasts[i], exists[i] = f.get(key)
		k := lasts[i]
		if c.RequestID == "" {
			continue
		}
		if exists[i] && k.RequestID == c.RequestID && k.State == Held && k.Holder == c.Holder {
			mine++
			continue
		}
		if exists[i] && k.RequestID == c.RequestID {
			known = true
		} else if _, ok := f.hist.lookup(key, c.RequestID, KindAcquire); ok {
			known = true
		}
	}
	// A request id already answered: its grants, renewed, while every one
	// is live; ErrGrantEnded once any ended. Never a second set of grants.
	if known || mine > 0 && mine < len(c.Keys) {
		return &Result{Err: ErrGrantEnded}, notices
	}
	for i, key := range c.Keys {
		if s := f.shapeOf(key); s != nil {
			if p := s.permits[0]; s.shared {
				return &Result{Key: p, Err: &HeldError{Key: key, Holder: p.Holder, Token: p.Token}}, notices
			}
			return &Result{Key: s.permits[0], Err: s.mismatch(key)}, notices
		}
		if k := lasts[i]; exists[i] && k.State == Held && k.Holder != c.Holder {
			return &Result{Key: k, Err: &HeldError{Key: key, Holder: k.Holder, Token: k.Token}}, notices
		}
		if err := f.slotRefusal(key, 0, 1); err != nil {
			return &Result{Key: lasts[i], Err: err}, notices
		}
	}
	toks := make([]KeyState, len(c.Keys))
	for i := range c.Keys {
		if k := lasts[i]; exists[i] && k.State == Held {
			continue // the holder's own grant: renewed below
		}
		tok, err := f.nextToken(lasts[i], exists[i], pos.term)
		if err != nil {
			return &Result{Key: lasts[i], Err: err}, notices
		}
		toks[i].Token = tok
	}
	grants := make([]KeyState, len(c.Keys))
	res := &Result{Changed: true, Renewed: mine == len(c.Keys), Multi: &grants}
	for i, key := range c.Keys {
		k := lasts[i]
		renewed := exists[i] && k.State == Held
		if renewed {
			k.TTL, k.Armed = c.TTL, pos.index
			k = f.put(k)
			if c.RequestID != k.RequestID {
				f.hist.retire(Retired{Key: key, RequestID: c.RequestID, Token: k.Token, Owner: OwnerOf(c.Holder)}, f.policy(true))
			}
		} else {
			if exists[i] {
				f.hist.retire(Retired{Key: key, RequestID: k.RequestID, Token: k.Token, Owner: OwnerOf(k.Holder)}, f.policy(true))
			}
			k = f.put(KeyState{Key: key, Holder: c.Holder, Token: toks[i].Token, TTL: c.TTL, State: Held, RequestID: c.RequestID, Index: pos.index, Armed: pos.index})
		}
		grants[i] = k
		notices = append(notices, notice{key: k, granted: true, renewed: renewed})
	}
	res.Key = grants[0]
	return res, notices
}

// Grants returns the grants of an AcquireMulti entry (nil for any other).
func (r *Result) Grants() []KeyState {
	if r.Multi == nil {
		return nil
	}
	return *r.Multi
}
