package client

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/fenced/fenced/fence"
)

// maxSSELine bounds one line of a watch stream.
const maxSSELine = 1 << 20

var errSSELineTooLong = errors.New("watch: event line too long")

// sseReader reads server-sent events (id, event and data fields; comments
// and retry ignored) without allocating per line: a watcher of a busy key
// reads one event per change, so the reader's cost is paid per delivery.
type sseReader struct {
	br             *bufio.Reader
	id, name, data []byte
	long           []byte // a line longer than br's buffer
	eof            bool   // the last line ended the stream
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, 4096)}
}

// next returns the next complete event. Its slices hold until the next
// call. A stream that ends (even cleanly) is io.ErrUnexpectedEOF: a watch
// stream never ends by itself.
func (r *sseReader) next() (id, name, data []byte, err error) {
	r.id, r.name, r.data = r.id[:0], r.name[:0], r.data[:0]
	for {
		line, err := r.line()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, nil, nil, err
		}
		if len(line) == 0 {
			if len(r.data) > 0 {
				return r.id, r.name, r.data, nil
			}
			r.id, r.name, r.data = r.id[:0], r.name[:0], r.data[:0]
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			r.id = append(r.id[:0], value...)
		case "event":
			r.name = append(r.name[:0], value...)
		case "data":
			if len(r.data) > 0 {
				r.data = append(r.data, '\n')
			}
			r.data = append(r.data, value...)
		}
	}
}

// line returns the next line without its "\n" or "\r\n"; it holds until
// the next read.
func (r *sseReader) line() ([]byte, error) {
	if r.eof {
		return nil, io.EOF
	}
	line, err := r.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		r.long = append(r.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(r.long) > maxSSELine {
				return nil, errSSELineTooLong
			}
			line, err = r.br.ReadSlice('\n')
			r.long = append(r.long, line...)
		}
		line = r.long
	}
	switch {
	case errors.Is(err, io.EOF) && len(line) > 0:
		// A last line without its end is a line all the same.
		r.eof = true
	case err != nil:
		return nil, err
	default:
		line = line[:len(line)-1]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readSSE hands each complete event of r to fn.
func readSSE(r io.Reader, fn func(id, name string, data []byte) error) error {
	sr := newSSEReader(r)
	for {
		id, name, data, err := sr.next()
		if err != nil {
			return err
		}
		if err := fn(string(id), string(name), data); err != nil {
			return err
		}
	}
}

// parseID reads an event id (a log index) without allocating.
func parseID(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// eventName returns the name of a watch event, without allocating for the
// names servers send.
func eventName(b []byte) string {
	switch string(b) {
	case "granted":
		return "granted"
	case "renewed":
		return "renewed"
	case "released":
		return "released"
	case "force_released":
		return "force_released"
	case "expired":
		return "expired"
	case "handed_off":
		return "handed_off"
	case "deleted":
		return "deleted"
	case WatchState:
		return WatchState
	case WatchSync:
		return WatchSync
	case WatchReset:
		return WatchReset
	case WatchUnavailable:
		return WatchUnavailable
	case "held":
		return "held"
	case "lagged":
		return "lagged"
	case "restored":
		return "restored"
	}
	return string(b)
}

// eventDecoder decodes the data of watch events into WatchEvents exactly as
// encoding/json does, cheaply for the flat objects servers send: it reuses
// the strings of the previous event (a watcher of one key hears the same
// key, holder and TTL again and again) and falls back to encoding/json for
// anything it does not handle (escapes, non-ASCII text, unknown fields,
// null, white space).
type eventDecoder struct {
	last [6]string // key, holder, ttl, lock_delay, prev_holder, value
}

func (d *eventDecoder) decode(data []byte, ev *WatchEvent) error {
	*ev = WatchEvent{}
	if d.fast(data, ev) {
		return nil
	}
	*ev = WatchEvent{}
	return json.Unmarshal(data, ev)
}

// str returns b as a string, reusing the previous one in slot when equal.
func (d *eventDecoder) str(slot int, b []byte) string {
	if d.last[slot] != string(b) {
		d.last[slot] = string(b)
	}
	return d.last[slot]
}

// fast decodes data when it is a flat object of known fields with plain
// ASCII strings; false when encoding/json must decide.
func (d *eventDecoder) fast(data []byte, ev *WatchEvent) bool {
	if len(data) < 2 || data[0] != '{' {
		return false
	}
	i := 1
	if data[i] == '}' {
		return i+1 == len(data)
	}
	for {
		name, j, ok := plainString(data, i)
		if !ok || j >= len(data) || data[j] != ':' {
			return false
		}
		i = j + 1
		if string(name) == "index" {
			if i, ok = d.number(data, i, &ev.Index); !ok {
				return false
			}
		} else {
			var v []byte
			if v, i, ok = plainString(data, i); !ok || !d.set(ev, name, v) {
				return false
			}
		}
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i++
		case '}':
			return i+1 == len(data)
		default:
			return false
		}
	}
}

// number reads a JSON unsigned integer that fits a uint64.
func (d *eventDecoder) number(data []byte, i int, out *uint64) (int, bool) {
	j := i
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		j++
	}
	if j == i || j-i > 1 && data[i] == '0' {
		return 0, false
	}
	if j < len(data) && (data[j] == '.' || data[j] == 'e' || data[j] == 'E') {
		return 0, false
	}
	n, ok := parseID(data[i:j])
	if !ok {
		return 0, false
	}
	*out = n
	return j, true
}

// set sets the string field name of ev to v; false for fields it does not
// know or values encoding/json would treat otherwise.
func (d *eventDecoder) set(ev *WatchEvent, name, v []byte) bool {
	switch string(name) {
	case "type":
		ev.Type = eventName(v)
	case "key":
		ev.Key = d.str(0, v)
	case "holder":
		ev.Holder = d.str(1, v)
	case "token", "prev_token":
		t, err := fence.Parse(string(v))
		if err != nil {
			return false
		}
		if string(name) == "token" {
			ev.Token = t
		} else {
			ev.PrevToken = t
		}
	case "state":
		ev.State = eventName(v)
	case "ttl":
		ev.TTL = d.str(2, v)
	case "lock_delay":
		ev.LockDelay = d.str(3, v)
	case "prev_holder":
		ev.PrevHolder = d.str(4, v)
	case "ended":
		ev.Ended = eventName(v)
	case "reason":
		ev.Reason = eventName(v)
	case "value":
		ev.Value = d.str(5, v)
	default:
		return false
	}
	return true
}

// plainString reads the JSON string at data[i] if it holds only printable
// ASCII without escapes, and returns its content and the index after its
// closing quote. The fast path of the event decoder takes only such strings
// and leaves the rest to encoding/json. (The server's request decoder has
// its own copy: the two modules share no code beyond the wire types.)
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}
