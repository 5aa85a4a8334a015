// Package history records what the chaos suite's clients asked fenced and what
// they heard back, with invoke and complete times on one monotonic clock, and
// the fault timeline beside it. Checkers read nothing else.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fenced/fenced/fence"
)

// Kinds of operation.
const (
	Acquire = "acquire"
	Renew   = "renew"
	Release = "release"
	Verify  = "verify"
	// Keepalive renews every lease of a holder; Granted is the token of the
	// key's grant it renewed, 0 if none.
	Keepalive = "keepalive"
	// Write and Read go to the harness's fenced resource, not to fenced.
	Write = "write"
	Read  = "read"
	// AcquireMulti asks for every key of Keys at once; Grants are the
	// tokens it returned, in the order of Keys.
	AcquireMulti = "acquire-multi"
	// ReadKey is a linearizable read of one key (GET /v1/keys/{key}):
	// CurrentHolder, Current and KeyIndex are what it showed.
	ReadKey = "read-key"
)

// Outcome of an operation, as Jepsen names them.
type Outcome string

const (
	// OK: the operation happened, with the recorded output.
	OK Outcome = "ok"
	// Fail: a definite refusal; the operation changed nothing.
	Fail Outcome = "fail"
	// Info: unknown; the operation may or may not have taken effect, at any
	// time after it was invoked. Never read as a failure.
	Info Outcome = "info"
)

// Op is one operation of a client, from invocation to completion.
type Op struct {
	Index  int    `json:"index"`
	Client int    `json:"client"`
	Kind   string `json:"f"`
	Key    string `json:"key"`
	// Holder is the acting holder (acquire, renew, release, write, read), or
	// the holder a verify names ("" for a verify of the token alone).
	Holder string `json:"holder,omitempty"`
	// Token is the token an operation carries (renew, release, verify,
	// write, read).
	Token fence.Token `json:"token,omitempty"`
	// Own marks a verify of the client's own current grant.
	Own bool `json:"own,omitempty"`
	// Value is a write's value.
	Value int `json:"value,omitempty"`
	// Force marks an operator's forced release: it ends the grant of Token
	// whoever holds it (Holder is empty).
	Force bool `json:"force,omitempty"`
	// Wait is how long an acquire asked to wait for the key.
	Wait time.Duration `json:"wait,omitempty"`
	// Limit is the semaphore limit an acquire is judged against (0: a
	// lock), and Mode "shared" or "exclusive" for a readers-writer acquire
	// ("" for every other one).
	Limit int    `json:"limit,omitempty"`
	Mode  string `json:"mode,omitempty"`
	// LockDelay is the lock-delay an acquire asked for: a grant that
	// expires keeps its slot (a permit's) or keeps writers out (a
	// reader's) this long after.
	LockDelay time.Duration `json:"lock_delay,omitempty"`
	// Keys are the keys of a multi-key acquire (Key is the first).
	Keys []string `json:"keys,omitempty"`
	// Invoke and Complete are nanoseconds since the run started, on the
	// monotonic clock.
	Invoke   int64   `json:"invoke"`
	Complete int64   `json:"complete"`
	Outcome  Outcome `json:"outcome"`

	// Granted is the token an acquire returned.
	Granted fence.Token `json:"granted,omitempty"`
	Renewed bool        `json:"renewed,omitempty"`
	// Grants are a multi-key acquire's tokens, in the order of Keys.
	Grants []fence.Token `json:"grants,omitempty"`
	// KeyIndex is the log index of the grant a key read showed.
	KeyIndex uint64 `json:"key_index,omitempty"`
	// Ended is the token of the grant an acknowledged release says it
	// ended (the answer's token).
	Ended fence.Token `json:"ended,omitempty"`
	// Code is the wire error code of a refusal or unknown outcome, or the
	// reason of a verify verdict.
	Code   string `json:"code,omitempty"`
	HeldBy string `json:"held_by,omitempty"`
	// Allow, Current and CurrentHolder are a verify's verdict.
	Allow         bool        `json:"allow,omitempty"`
	Current       fence.Token `json:"current,omitempty"`
	CurrentHolder string      `json:"current_holder,omitempty"`
	// A read of the resource returned Count values whose digest is Digest
	// (see Digest); Values keeps the last few of them, for people. Seq is
	// the position of the operation in the resource's own order.
	Count  int    `json:"count,omitempty"`
	Digest uint64 `json:"digest,omitempty"`
	Values []int  `json:"values,omitempty"`
	Seq    int    `json:"seq,omitempty"`
	Error  string `json:"error,omitempty"`
	// Broken names the positive-control mode that produced this answer
	// instead of the cluster, if any.
	Broken string `json:"broken,omitempty"`
}

// Fault is one interval of the fault timeline.
type Fault struct {
	Index   int      `json:"index"`
	Nemesis string   `json:"nemesis"`
	Start   int64    `json:"start"`
	End     int64    `json:"end"`
	Nodes   []string `json:"nodes,omitempty"`
	Detail  string   `json:"detail,omitempty"`
}

// TailLen is how many of a read's last values the history keeps.
const TailLen = 5

// Digest is the FNV-1a hash of a sequence of values: a read's content in a
// few bytes, so the history does not grow with the square of the writes.
func Digest(values []int) uint64 {
	h := uint64(14695981039346656037)
	for _, v := range values {
		for i := 0; i < 8; i++ {
			h ^= uint64(byte(v >> (8 * i)))
			h *= 1099511628211
		}
	}
	return h
}

// Tail returns the last TailLen values.
func Tail(values []int) []int {
	if len(values) > TailLen {
		values = values[len(values)-TailLen:]
	}
	return append([]int(nil), values...)
}

// Recorder collects operations and faults from concurrent clients.
type Recorder struct {
	start time.Time

	mu     sync.Mutex
	ops    []*Op
	faults []*Fault
}

// NewRecorder returns a recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Start returns the wall-clock time at which the recorder's clock is zero.
func (r *Recorder) Start() time.Time { return r.start }

// Now returns nanoseconds since the recorder started, on the monotonic clock.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Invoke records the invocation of op and returns it, to be completed with
// Complete. The caller must not touch op between Invoke and Complete except
// through the fill function.
func (r *Recorder) Invoke(op Op) *Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Index = len(r.ops)
	op.Invoke = r.Now()
	op.Complete = -1
	p := &op
	r.ops = append(r.ops, p)
	return p
}

// Complete fills in op's outcome and its completion time.
func (r *Recorder) Complete(op *Op, fill func(*Op)) {
	now := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	fill(op)
	op.Complete = now
}

// BeginFault records the start of a fault and returns it for EndFault.
func (r *Recorder) BeginFault(nemesis string, nodes []string, detail string) *Fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := &Fault{Index: len(r.faults), Nemesis: nemesis, Start: r.Now(), End: -1, Nodes: nodes, Detail: detail}
	r.faults = append(r.faults, f)
	return f
}

// EndFault records the heal of a fault, with more detail if given.
func (r *Recorder) EndFault(f *Fault, detail string) {
	now := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if f.End < 0 {
		f.End = now
	}
	if detail != "" {
		f.Detail += "; " + detail
	}
}

// Ops returns a copy of the history, ordered by invocation. Operations still
// in flight are returned as info with the current time as completion.
func (r *Recorder) Ops() []Op {
	now := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Op, len(r.ops))
	for i, p := range r.ops {
		out[i] = *p
		if out[i].Complete < 0 {
			out[i].Complete, out[i].Outcome, out[i].Error = now, Info, "still in flight at the end of the run"
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Invoke < out[j].Invoke })
	return out
}

// Faults returns a copy of the fault timeline; a fault not healed yet ends now.
func (r *Recorder) Faults() []Fault {
	now := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Fault, len(r.faults))
	for i, f := range r.faults {
		out[i] = *f
		if out[i].End < 0 {
			out[i].End = now
		}
	}
	return out
}

// WriteJSONL writes one JSON value per line.
func WriteJSONL[T any](path string, items []T) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range items {
		if err := enc.Encode(&items[i]); err != nil {
			f.Close()
			return fmt.Errorf("encode %s: %w", path, err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// ReadJSONL reads a file written by WriteJSONL.
func ReadJSONL[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return DecodeJSONL[T](f)
}

// DecodeJSONL decodes one JSON value per line from r.
func DecodeJSONL[T any](r io.Reader) ([]T, error) {
	var out []T
	dec := json.NewDecoder(r)
	for {
		var v T
		if err := dec.Decode(&v); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, fmt.Errorf("decode line %d: %w", len(out)+1, err)
		}
		out = append(out, v)
	}
}

// Tok renders a token as its decimal text with epoch.seq beside it.
func Tok(t fence.Token) string {
	if t == 0 {
		return "0"
	}
	return fmt.Sprintf("%s(%d.%d)", t, t.Epoch(), t.Seq())
}

// Describe is a short human form of an operation, for reports.
func (o *Op) Describe() string {
	var in string
	switch o.Kind {
	case Acquire:
		in = fmt.Sprintf("acquire(%s, %s)", o.Key, o.Holder)
		if o.Wait > 0 {
			in = fmt.Sprintf("acquire(%s, %s, wait=%v)", o.Key, o.Holder, o.Wait)
		}
		if o.Limit > 0 {
			in = strings.TrimSuffix(in, ")") + fmt.Sprintf(", limit=%d)", o.Limit)
		}
		if o.Mode != "" {
			in = strings.TrimSuffix(in, ")") + ", " + o.Mode + ")"
		}
	case AcquireMulti:
		in = fmt.Sprintf("acquire-multi(%v, %s)", o.Keys, o.Holder)
	case ReadKey:
		in = fmt.Sprintf("read-key(%s)", o.Key)
	case Release:
		in = fmt.Sprintf("release(%s, %s, %s)", o.Key, o.Holder, Tok(o.Token))
		if o.Force {
			in = fmt.Sprintf("release(%s, force, %s)", o.Key, Tok(o.Token))
		}
	case Keepalive:
		in = fmt.Sprintf("keepalive(%s, %s)", o.Key, o.Holder)
	case Verify:
		h := o.Holder
		if h == "" {
			h = "-"
		}
		in = fmt.Sprintf("verify(%s, %s, holder=%s)", o.Key, Tok(o.Token), h)
	case Write:
		in = fmt.Sprintf("write(%s, %s, %s, v=%d)", o.Key, o.Holder, Tok(o.Token), o.Value)
	default:
		in = fmt.Sprintf("%s(%s, %s, %s)", o.Kind, o.Key, o.Holder, Tok(o.Token))
	}
	var out string
	switch {
	case o.Outcome == Info:
		out = "info"
		if o.Code != "" {
			out += " " + o.Code
		}
	case o.Outcome == Fail:
		out = "fail " + o.Code
		if o.HeldBy != "" {
			out += " by " + o.HeldBy
		}
	case o.Kind == AcquireMulti:
		toks := make([]string, len(o.Grants))
		for i, t := range o.Grants {
			toks[i] = Tok(t)
		}
		out = "ok " + strings.Join(toks, " ")
	case o.Kind == ReadKey:
		out = fmt.Sprintf("ok %s/%s index %d", Tok(o.Current), o.CurrentHolder, o.KeyIndex)
	case o.Kind == Acquire, o.Kind == Keepalive:
		out = "ok " + Tok(o.Granted)
		if o.Renewed {
			out += " (renewed)"
		}
	case o.Kind == Verify:
		out = fmt.Sprintf("allow=%v %s current=%s/%s", o.Allow, o.Code, Tok(o.Current), o.CurrentHolder)
	case o.Kind == Read:
		out = fmt.Sprintf("ok %d values, ending %v", o.Count, o.Values)
	case o.Kind == Release && o.Ended != 0 && o.Ended != o.Token:
		out = "ok, ended " + Tok(o.Ended)
	default:
		out = "ok"
	}
	if o.Broken != "" {
		out += " [broken:" + o.Broken + "]"
	}
	return fmt.Sprintf("#%d c%d %s -> %s [%.3fs..%.3fs]", o.Index, o.Client, in, out,
		float64(o.Invoke)/1e9, float64(o.Complete)/1e9)
}

// Delivery is a grant a watch stream received: which stream, the grant's
// key and token (a token is unique per key only) and when it arrived (nanoseconds since the run started, as Op's
// times). The report draws each stream's lag from them: the time from the
// grant's acknowledgement to its client to its arrival on the stream.
type Delivery struct {
	Stream int         `json:"stream"`
	Key    string      `json:"key"`
	Token  fence.Token `json:"token"`
	At     int64       `json:"at"`
}
