package client

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/fenced/fenced/fence"
)

// sampleEvents are watch events as servers send them (the server's tests
// check that it encodes these very values from its state machine's events).
func sampleEvents() []WatchEvent {
	tok := fence.Token(2<<32 | 1)
	return []WatchEvent{
		{Type: WatchGranted, Index: 44, Key: "jobs/b", Holder: "h2", Token: tok, State: "held", TTL: "30s", Value: "http://10.0.0.1:8080"},
		{Type: WatchReleased, Index: 45, Key: "jobs/b", Holder: "h2", Token: tok, State: "released", TTL: "30s"},
		{Type: WatchHandedOff, Index: 47, Key: "jobs/a", Holder: "h1", Token: tok + 1, State: "held", TTL: "1m0s", LockDelay: "1s",
			PrevHolder: "h0", PrevToken: tok, Ended: WatchExpired},
		{Type: WatchState, Index: 41, Key: "k", Holder: "h", Token: tok, State: "held", TTL: "1s"},
		{Type: WatchSync, Index: 41},
		{Type: WatchReset, Reason: "lagged"},
	}
}

// TestEventDecoderTakesTheFastPathForServerEvents: what servers send is
// decoded without encoding/json, to the same value.
func TestEventDecoderTakesTheFastPathForServerEvents(t *testing.T) {
	var d eventDecoder
	for _, want := range sampleEvents() {
		data, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var got WatchEvent
		if !d.fast(data, &got) {
			t.Fatalf("%s: not decoded by the fast path", data)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s decoded to %+v, want %+v", data, got, want)
		}
	}
}

// FuzzEventDecoder: the decoder gives what encoding/json gives, value and
// failure alike, for any input.
func FuzzEventDecoder(f *testing.F) {
	for _, ev := range sampleEvents() {
		data, _ := json.Marshal(ev)
		f.Add(data)
	}
	for _, s := range []string{`{}`, `{"index":01}`, `{"index":1e3}`, `{"index":18446744073709551616}`, `{"key":"a\"b"}`,
		`{"key":"é"}`, `{"Key":"a"}`, `{"token":"0"}`, `{"token":""}`, `{"key":null}`, `{"index":1} `, `{ "index":1}`,
		`{"index":1,"index":2}`, `{"type":"x","extra":1}`, `{"index":-1}`, `{"key":"a"`, `[]`, `{"index":1,}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want WatchEvent
		wantErr := json.Unmarshal(data, &want)
		var got WatchEvent
		var d eventDecoder
		gotErr := d.decode(data, &got)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%q: decoder error %v, encoding/json %v", data, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decoded %+v, encoding/json %+v", data, got, want)
		}
		// Decoding again with the strings of the last event reused.
		if wantErr == nil {
			var again WatchEvent
			if err := d.decode(data, &again); err != nil || !reflect.DeepEqual(again, want) {
				t.Fatalf("%q decoded again: %+v, %v", data, again, err)
			}
		}
	})
}

type sseEvent struct{ id, name, data string }

// scanSSE is the reader the watch client used before: bufio.Scanner lines.
func scanSSE(r *strings.Reader) ([]sseEvent, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxSSELine)
	var out []sseEvent
	var id, name string
	var data []byte
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if len(data) > 0 {
				out = append(out, sseEvent{id, name, string(data)})
			}
			id, name, data = "", "", nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id = value
		case "event":
			name = value
		case "data":
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, value...)
		}
	}
	return out, sc.Err()
}

// FuzzSSEReader: the reader gives the events a line scanner gives.
func FuzzSSEReader(f *testing.F) {
	f.Add("id: 41\nevent: sync\ndata: {\"type\":\"sync\",\"index\":41}\n\n")
	f.Add("event: state\r\ndata: a\r\ndata: b\r\n\r\n: comment\n\nid:7\ndata:x\n\n")
	f.Add("data:\ndata:\n\ndata: y\nretry: 10\n\n" + strings.Repeat("z", 5000) + "\ndata: " + strings.Repeat("w", 9000) + "\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		want, wantErr := scanSSE(strings.NewReader(in))
		var got []sseEvent
		err := readSSE(strings.NewReader(in), func(id, name string, data []byte) error {
			got = append(got, sseEvent{id, name, string(data)})
			return nil
		})
		if wantErr == nil && !errors.Is(err, io.ErrUnexpectedEOF) || wantErr != nil && err == nil {
			t.Fatalf("%q: reader ended with %v, scanner with %v", in, err, wantErr)
		}
		if wantErr == nil && fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%q: read %q, scanner %q", in, got, want)
		}
	})
}
