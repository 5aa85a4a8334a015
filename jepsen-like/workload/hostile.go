package workload

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand"
	"strings"
	"time"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

// BrokenResourceSkipProof: the resource requires proofs but never checks
// them, so the hostile client's made-up tokens are admitted: the
// hostile-tokens checker must fail.
const BrokenResourceSkipProof = "resource-skip-proof"

// HostileHolder is the holder the hostile client's accesses are recorded
// under.
const HostileHolder = "hostile"

// HostileWrite is the history kind of a hostile client's write.
const HostileWrite = "hostile-write"

// startHostile runs, when the resource requires proofs, a client that never
// asks the cluster for anything: every 100-300 ms it writes to a key with a
// token it made up, above the key's highest, carrying no proof, a genuine
// proof of an earlier grant of the key (replayed), that proof with the
// token in its payload raised, or garbage. A resource that checks proofs
// admits none of them (checker.HostileTokens); one that skips the check
// (BrokenResourceSkipProof) admits them all, and its real holders are
// refused from then on.
func (w *Workload) startHostile(ctx context.Context) {
	if !w.res.RequiresProofs() {
		return
	}
	rng := rand.New(rand.NewSource(w.cfg.Seed + 77))
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(100+rng.Intn(200)) * time.Millisecond):
			}
			w.hostileWrite(KeyName(rng.Intn(w.cfg.Keys)), i, rng)
		}
	}()
}

// grantProof is a grant's proof and the token it was made for.
type grantProof struct {
	proof string
	token fence.Token
}

// hostileWrite makes up a token and a proof for key and writes with them.
// The token is an epoch above both the resource's highest and the latest
// grant's: a grant the resource has not seen yet is above its highest, and
// replaying that grant's own proof with its own token is what its holder
// does, not a made-up token.
func (w *Workload) hostileWrite(key string, i int, rng *rand.Rand) {
	w.mu.Lock()
	borrowed := w.proofs[key]
	w.mu.Unlock()
	high := max(w.res.High(key), borrowed.token)
	tok := fence.Token(uint64(high) + 1<<32)
	if tok > fence.MaxToken || rng.Intn(4) == 0 {
		tok = fence.MaxToken
	}
	var p, how string
	switch i % 4 {
	case 0:
		how = "no proof"
	case 1:
		p, how = borrowed.proof, "a replayed proof of an earlier grant"
	case 2:
		p, how = raiseToken(borrowed.proof, tok), "a proof with its token raised"
	default:
		p, how = "eyJhbGciOiJub25lIn0.e30.", `an "alg":"none" proof`
	}
	op := w.rec.Invoke(history.Op{Client: -1, Kind: HostileWrite, Key: key, Holder: HostileHolder, Token: tok, Value: -i - 1})
	r := w.res.Write(key, tok, -i-1, p)
	w.rec.Complete(op, func(o *history.Op) {
		o.Seq, o.Current = r.Seq, r.High
		o.Error = how
		switch {
		case r.Accepted:
			o.Outcome = history.OK
			if w.res.SkipsProofs() {
				o.Broken = BrokenResourceSkipProof
			}
		case r.ProofRefused != "":
			o.Outcome, o.Code = history.Fail, r.ProofRefused
		default:
			o.Outcome, o.Code = history.Fail, "stale_token"
		}
	})
}

// raiseToken rewrites the token of a proof's payload, keeping its header
// and signature: what a client that edits a genuine proof sends.
func raiseToken(p string, tok fence.Token) string {
	parts := strings.Split(p, ".")
	if len(parts) != 3 {
		return p
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return p
	}
	s := string(payload)
	if i := strings.Index(s, `"token":"`); i >= 0 {
		j := strings.IndexByte(s[i+9:], '"')
		if j >= 0 {
			s = s[:i+9] + fmt.Sprint(tok) + s[i+9+j:]
		}
	}
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(s)) + "." + parts[2]
}
