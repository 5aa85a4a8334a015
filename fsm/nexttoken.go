package fsm

import "github.com/fenced/fenced/fence"

// NextToken returns the token an acquire of key by holder would carry if it
// were applied now, in an entry of term: the token of the holder's own live
// grant, or the key's next. ok is false when the acquire would be refused or
// would make a permit (a key with live permits or shared grants), or when
// the key's epochs or seqs are exhausted.
//
// It is a guess, not a promise: entries applied before the acquire's own,
// a retry answered from the key's history, or a new term can give the grant
// another token. The leader signs a grant's proof for this token while the
// entry commits, and uses that proof only for a grant whose claims turn out
// to be exactly the ones it signed.
func (f *FSM) NextToken(key, holder string, term uint64) (tok fence.Token, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.shapeOf(key) != nil {
		return 0, false
	}
	k, exists := f.get(key)
	if exists && k.State == Held {
		return k.Token, k.Holder == holder
	}
	tok, err := f.nextToken(k, exists, term)
	return tok, err == nil
}
