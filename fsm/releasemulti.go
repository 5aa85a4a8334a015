package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/fenced/fenced/fence"
)

// typeReleaseMulti is the command type of ReleaseMulti.
const typeReleaseMulti byte = 16

// ReleaseKey names one grant of a ReleaseMulti: a key and its token (a
// lock's grant, a permit or a shared grant).
type ReleaseKey struct {
	Key   string
	Token fence.Token
}

// ReleaseMulti ends several grants of one holder at once, all or none, in
// one log entry (a multi-key acquire's set, or any grants of the holder):
// every grant is checked as a Release of it would be before any changes,
// and the first refusal, in the request's order, is answered naming its
// key (KeyError) with nothing changed. A grant the holder already released
// is, as for a single release, no refusal and no change. RequestID is
// remembered for every key of the set, as a release's: a repeat is
// answered with the grants the first one ended (Recalled), and never ends
// a later grant.
type ReleaseMulti struct {
	Keys      []ReleaseKey
	Holder    string
	RequestID string
}

// KeyError is a refusal about one key of a set (a ReleaseMulti names the
// grant it could not end). errors.Is(err, Err) holds.
type KeyError struct {
	Key string
	Err error
}

func (e *KeyError) Error() string { return fmt.Sprintf("key %q: %v", e.Key, e.Err) }

// Unwrap returns the refusal of the key.
func (e *KeyError) Unwrap() error { return e.Err }

func (c ReleaseMulti) encode(b []byte) []byte {
	b = append(b, typeReleaseMulti, version1)
	b = binary.AppendUvarint(b, uint64(len(c.Keys)))
	for _, k := range c.Keys {
		b = appendString(b, k.Key)
		b = binary.AppendUvarint(b, uint64(k.Token))
	}
	b = appendString(b, c.Holder)
	return appendString(b, c.RequestID)
}

func (d *decoder) releaseMulti() ReleaseMulti {
	var c ReleaseMulti
	// A key record is at least its length and a token (an empty key is
	// refused when applied, not here).
	n := d.count(2)
	if n > 0 {
		c.Keys = make([]ReleaseKey, 0, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		c.Keys = append(c.Keys, ReleaseKey{Key: d.str(), Token: fence.Token(d.uvarint())})
	}
	c.Holder, c.RequestID = d.str(), d.str()
	return c
}

// valid reports whether c names 1 to MaxMultiKeys distinct keys, each with
// a token, and a holder.
func (c ReleaseMulti) valid() bool {
	if len(c.Keys) == 0 || len(c.Keys) > MaxMultiKeys || c.Holder == "" {
		return false
	}
	seen := make(map[string]bool, len(c.Keys))
	for _, k := range c.Keys {
		if k.Key == "" || k.Token == 0 || seen[k.Key] {
			return false
		}
		seen[k.Key] = true
	}
	return true
}

// releaseMulti applies a ReleaseMulti entry: every grant is checked before
// any ends, so the entry ends all or none.
func (f *FSM) releaseMulti(c ReleaseMulti, pos logPos, notices []notice) (*Result, []notice) {
	if !c.valid() {
		return &Result{Err: fmt.Errorf("%w: 1 to %d distinct keys, each with a token, and a holder are required", ErrInvalid, MaxMultiKeys)}, notices
	}
	f.tick(pos, true)
	if r := f.recallReleaseMulti(c); r != nil {
		return r, notices
	}
	for _, rk := range c.Keys {
		if k, _, err := f.endable(Release{Key: rk.Key, Holder: c.Holder, Token: rk.Token}); err != nil {
			return &Result{Key: k, Err: &KeyError{Key: rk.Key, Err: err}}, notices
		}
	}
	ended := make([]KeyState, len(c.Keys))
	res := &Result{Multi: &ended}
	for i, rk := range c.Keys {
		r := f.end(Release{Key: rk.Key, Holder: c.Holder, Token: rk.Token})
		if r.Err != nil {
			// endable said it would not be: a bug, and replicas must not
			// guess past it.
			panic(fmt.Sprintf("fsm: release of %q refused after its check: %v", rk.Key, r.Err))
		}
		ended[i] = r.Key
		if r.Changed {
			res.Changed = true
			notices = append(notices, notice{key: r.Key})
		}
		if c.RequestID != "" {
			f.hist.retire(Retired{Key: rk.Key, RequestID: c.RequestID, Token: r.Key.Token, Kind: KindRelease, Owner: OwnerOf(c.Holder)}, f.policy(true))
		}
	}
	res.Key = ended[0]
	return res, notices
}

// recallReleaseMulti answers a ReleaseMulti whose request id was applied
// already (remembered for any key of its set): with the grants it ended,
// changing nothing. nil for a new request id.
func (f *FSM) recallReleaseMulti(c ReleaseMulti) *Result {
	if c.RequestID == "" {
		return nil
	}
	known := false
	ended := make([]KeyState, len(c.Keys))
	for i, rk := range c.Keys {
		tok, ok := f.hist.lookup(rk.Key, c.RequestID, KindRelease)
		if !ok {
			tok = rk.Token
		}
		known = known || ok
		ended[i] = KeyState{Key: rk.Key, Token: tok, State: Released}
	}
	if !known {
		return nil
	}
	return &Result{Key: ended[0], Multi: &ended, Recalled: true}
}
