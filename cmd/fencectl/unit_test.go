package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/client"
)

// testEnv is an env with captured output and the given environment.
func testEnv(vars map[string]string) (*env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &env{stdout: &out, stderr: &errb, getenv: func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}}, &out, &errb
}

// TestGlobalFlags: the command line wins over FENCE_* variables, which win
// over the defaults; global flags work before and after the command name.
func TestGlobalFlags(t *testing.T) {
	def := globals{endpoints: []string{defaultEndpoint}, output: outputTable, timeout: 10 * time.Second}
	for _, tc := range []struct {
		name string
		args []string
		vars map[string]string
		want globals
		err  string
	}{
		{"defaults", []string{"status"}, nil, def, ""},
		{"flags before the command", []string{"--endpoints", "a:1,b:2", "-o", "json", "--timeout", "3s", "status"}, nil,
			globals{endpoints: []string{"a:1", "b:2"}, output: outputJSON, timeout: 3 * time.Second}, ""},
		{"flags after the command", []string{"status", "--endpoints=a:1", "--output=json"}, nil,
			globals{endpoints: []string{"a:1"}, output: outputJSON, timeout: 10 * time.Second}, ""},
		{"environment", []string{"status"}, map[string]string{"FENCE_ENDPOINTS": "e:1, e:2", "FENCE_OUTPUT": "json", "FENCE_TIMEOUT": "1m"},
			globals{endpoints: []string{"e:1", "e:2"}, output: outputJSON, timeout: time.Minute}, ""},
		{"flag beats environment", []string{"--endpoints", "f:1", "status", "--timeout", "2s"},
			map[string]string{"FENCE_ENDPOINTS": "e:1", "FENCE_TIMEOUT": "1m"},
			globals{endpoints: []string{"f:1"}, output: outputTable, timeout: 2 * time.Second}, ""},
		{"empty variable is unset", []string{"status"}, map[string]string{"FENCE_ENDPOINTS": ""}, def, ""},
		{"other prefixes ignored", []string{"status"}, map[string]string{"FENCED_ENDPOINTS": "x:1", "ENDPOINTS": "y:1"}, def, ""},
		{"bad env duration", []string{"status"}, map[string]string{"FENCE_TIMEOUT": "soon"}, globals{}, "FENCE_TIMEOUT"},
		{"bad output", []string{"status", "-o", "yaml"}, nil, globals{}, "--output must be table or json"},
		{"bad env output", []string{"status"}, map[string]string{"FENCE_OUTPUT": "xml"}, globals{}, "--output must be"},
		{"no endpoints", []string{"status", "--endpoints", " , "}, nil, globals{}, "no endpoint"},
		{"zero timeout", []string{"status", "--timeout", "0s"}, nil, globals{}, "--timeout must be positive"},
		{"attempt timeout", []string{"status", "--attempt-timeout", "5s"}, nil,
			globals{endpoints: []string{defaultEndpoint}, output: outputTable, timeout: 10 * time.Second, attemptTimeout: 5 * time.Second}, ""},
		{"attempt timeout from the environment", []string{"status"}, map[string]string{"FENCE_ATTEMPT_TIMEOUT": "3s"},
			globals{endpoints: []string{defaultEndpoint}, output: outputTable, timeout: 10 * time.Second, attemptTimeout: 3 * time.Second}, ""},
		{"zero attempt timeout", []string{"status", "--attempt-timeout", "0s"}, nil, globals{}, "--attempt-timeout must be positive"},
		{"dial timeout", []string{"status", "--dial-timeout", "500ms"}, nil,
			globals{endpoints: []string{defaultEndpoint}, output: outputTable, timeout: 10 * time.Second, dialTimeout: 500 * time.Millisecond}, ""},
		{"dial timeout from the environment", []string{"status"}, map[string]string{"FENCE_DIAL_TIMEOUT": "5s"},
			globals{endpoints: []string{defaultEndpoint}, output: outputTable, timeout: 10 * time.Second, dialTimeout: 5 * time.Second}, ""},
		{"zero dial timeout", []string{"status", "--dial-timeout", "0s"}, nil, globals{}, "--dial-timeout must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _, _ := testEnv(tc.vars)
			inv, err := parse(e, tc.args)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || inv.cmd.name != "status" {
				t.Fatalf("parse: %+v, %v", inv, err)
			}
			if tc.want.attemptTimeout == 0 {
				tc.want.attemptTimeout = client.DefaultAttemptTimeout
			}
			if tc.want.dialTimeout == 0 {
				tc.want.dialTimeout = defaultDialTimeout
			}
			if !reflect.DeepEqual(e.g, tc.want) {
				t.Fatalf("globals %+v, want %+v", e.g, tc.want)
			}
		})
	}
}

// TestUsageErrors: wrong usage exits 2 with one "fencectl:" line and a
// pointer to the help, before any request is made.
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bogus"},
		{"--bogus", "status"},
		{"status", "extra"},
		{"status", "-o", "yaml"},
		{"key"},
		{"keys", "a", "b"},
		{"keys", "--limit", "-1"},
		{"acquire"},
		{"acquire", "k", "--ttl", "1ms"},
		{"acquire", "k", "--wait", "1h"},
		{"acquire", "k", "--ttl", "ten"},
		{"renew", "k", "4294967297"},
		{"renew", "k", "abc", "--holder", "a"},
		{"release", "k"},
		{"release", "k", "4294967297"},
		{"release", "--force"},
		{"release", "--force", "k", "1", "2"},
		{"keepalive"},
		{"keepalive", "--holder", "a", "--every", "-1s"},
		{"verify"},
		{"verify", "k"},
		{"verify", "k", "1", "2"},
		{"lock"},
		{"lock", "k"},
		{"lock", "--", "k", "true"},
		{"lock", "k", "x", "--", "true"},
		{"lock", "k", "--ttl", "2s", "--", "true"},
		{"lock", "k", "--grace", "2s", "--margin", "2s", "--", "true"},
		{"lock", "k", "--grace", "-1s", "--", "true"},
		{"selftest", "x"},
		{"help", "bogus"},
		{"help", "a", "b"},
	} {
		e, stdout, stderr := testEnv(nil)
		code := run(context.Background(), e, args)
		if code != exitUsage || stdout.Len() != 0 || !strings.HasPrefix(stderr.String(), "fencectl: ") ||
			!strings.Contains(stderr.String(), "Run 'fencectl help") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	// No command at all: the help, on stderr, and exit 2.
	e, _, stderr := testEnv(nil)
	if code := run(context.Background(), e, nil); code != exitUsage || !strings.Contains(stderr.String(), "Commands:") {
		t.Errorf("no command: exit %d, stderr %q", code, stderr)
	}
}

// TestHelp: the top-level help lists every command, and every command's help
// (both ways of asking) shows its usage, flags and examples.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		e, stdout, _ := testEnv(nil)
		if code := run(context.Background(), e, args); code != 0 {
			t.Fatalf("%q: exit %d", args, code)
		}
		for _, c := range commands {
			if !strings.Contains(stdout.String(), "\n  "+c.name+" ") {
				t.Errorf("%q does not list %s", args, c.name)
			}
		}
	}
	for _, c := range commands {
		for _, args := range [][]string{{"help", c.name}, {c.name, "--help"}, {c.name, "-h"}} {
			e, stdout, _ := testEnv(nil)
			if code := run(context.Background(), e, args); code != 0 {
				t.Fatalf("%q: exit %d", args, code)
			}
			out := stdout.String()
			for _, want := range []string{"Usage:\n  fencectl " + c.name, "Global flags:", "--endpoints", "Examples:\n  fencectl " + c.name} {
				if !strings.Contains(out, want) {
					t.Errorf("%q: help lacks %q:\n%s", args, want, out)
				}
			}
		}
	}
}

// TestLockTiming: the margin is the larger of ttl/3 and grace+1s, must exceed
// the grace, and the TTL must be at least 1.5 times the margin.
func TestLockTiming(t *testing.T) {
	for _, tc := range []struct {
		ttl, grace, margin time.Duration
		wantMargin         time.Duration
		err                string
	}{
		{10 * time.Second, 2 * time.Second, 0, 10 * time.Second / 3, ""},
		{3 * time.Second, 300 * time.Millisecond, 0, 1300 * time.Millisecond, ""},
		{time.Minute, 10 * time.Second, 0, 20 * time.Second, ""},
		{4500 * time.Millisecond, 2 * time.Second, 0, 3 * time.Second, ""},
		{4 * time.Second, 2 * time.Second, 0, 0, "at least 1.5 times the margin, 4.5s"},
		{2 * time.Second, 2 * time.Second, 0, 0, "too short"},
		{10 * time.Second, 0, 0, 10 * time.Second / 3, ""},
		{10 * time.Second, 2 * time.Second, 2500 * time.Millisecond, 2500 * time.Millisecond, ""},
		{10 * time.Second, 2 * time.Second, 2100 * time.Millisecond, 0, "must exceed --grace"},
		{10 * time.Second, 2 * time.Second, 7 * time.Second, 0, "too short"},
		{10 * time.Second, -time.Second, 0, 0, "--grace must not be negative"},
		{50 * time.Millisecond, 0, 0, 0, "--ttl"},
	} {
		lt, err := newLockTiming(tc.ttl, tc.grace, tc.margin)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ttl %v grace %v margin %v: error %v, want %q", tc.ttl, tc.grace, tc.margin, err, tc.err)
			}
			continue
		}
		if err != nil || lt.margin != tc.wantMargin || lt.margin <= lt.grace || lt.window != tc.ttl-lt.margin ||
			lt.interval != lt.window/3 || 3*lt.margin > 2*tc.ttl {
			t.Errorf("ttl %v grace %v margin %v: %+v, %v; want margin %v", tc.ttl, tc.grace, tc.margin, lt, err, tc.wantMargin)
		}
	}
}

// fakeFenced answers like fenced with canned documents, for output tests.
func fakeFenced(t *testing.T) *httptest.Server {
	t.Helper()
	keyDB := client.KeyInfo{Key: "db", Holder: "alice", Token: 8589934593, Epoch: 2, Seq: 1, State: "held", TTL: "10s", LeaseRemaining: "9.5s", Index: 7}
	keyJob := client.KeyInfo{Key: "db/job-with-long-name", Holder: "bob", Token: 12884901890, Epoch: 3, Seq: 2, State: "released", TTL: "1m0s", Index: 9}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		reply := func(status int, v any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(v)
		}
		switch r.URL.Path {
		case "/v1/keys":
			reply(200, client.KeysResponse{Keys: []client.KeyInfo{keyDB, keyJob}})
		case "/v1/keys/db":
			reply(200, keyDB)
		case "/v1/acquire":
			reply(409, client.ErrorResponse{Code: "held", Message: `key "db" is held by "alice"`, HeldBy: "alice", RetryAfter: "1s"})
		case "/v1/verify":
			var req client.VerifyRequest
			_ = json.Unmarshal(body, &req)
			switch req.Token {
			case "8589934593":
				reply(200, client.VerifyResponse{Allow: true, Reason: "ok", CurrentToken: 8589934593, Holder: "alice"})
			case "8589934594": // a broken answer: allow, but for another token
				reply(200, client.VerifyResponse{Allow: true, Reason: "ok", CurrentToken: 8589934593, Holder: "alice"})
			case "8589934595": // allow without reason
				reply(200, client.VerifyResponse{Allow: true})
			default:
				reply(500, client.ErrorResponse{Code: "internal", Message: "boom"})
			}
		default:
			reply(404, client.ErrorResponse{Code: "not_found", Message: r.URL.Path})
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestOutput checks the table and JSON output and error lines of commands
// against a fake fenced.
func TestOutput(t *testing.T) {
	srv := fakeFenced(t)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"keys table", []string{"keys"}, 0, "" +
			"KEY                    HOLDER  TOKEN        EPOCH  SEQ  STATE     TTL   REMAINING\n" +
			"db                     alice   8589934593   2      1    held      10s   9.5s\n" +
			"db/job-with-long-name  bob     12884901890  3      2    released  1m0s  -\n", ""},
		{"key table", []string{"key", "db"}, 0, "" +
			"key:        db\n" +
			"holder:     alice\n" +
			"token:      8589934593 (epoch 2, seq 1)\n" +
			"state:      held\n" +
			"ttl:        10s\n" +
			"remaining:  9.5s\n" +
			"index:      7\n", ""},
		{"key json", []string{"key", "db", "-o", "json"}, 0, `{
  "key": "db",
  "holder": "alice",
  "token": "8589934593",
  "epoch": 2,
  "seq": 1,
  "state": "held",
  "ttl": "10s",
  "lease_remaining": "9.5s",
  "index": 7
}
`, ""},
		{"held", []string{"acquire", "db", "--holder", "bob"}, exitErr, "", "fencectl: key db is held by alice; retry after 1s\n"},
		{"verify allow", []string{"verify", "db", "8589934593"}, 0, "ALLOW token 8589934593 is the current grant of key db (holder alice)\n", ""},
		{"verify allow for another token", []string{"verify", "db", "8589934594"}, exitRefused, "",
			"fencectl: REFUSE unavailable: inconsistent answer: allow with reason \"ok\" and current token 8589934593\n"},
		{"verify allow without reason", []string{"verify", "db", "8589934595"}, exitRefused, "", ""},
		{"verify server error", []string{"verify", "db", "8589934596"}, exitRefused, "", ""},
		{"verify malformed, not asked", []string{"verify", "db", "1e9"}, exitRefused, "",
			"fencectl: REFUSE malformed: malformed token: 'e' is not a decimal digit\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, stdout, stderr := testEnv(map[string]string{"FENCE_ENDPOINTS": srv.URL, "FENCE_TIMEOUT": "2s"})
			code := run(context.Background(), e, tc.args)
			if code != tc.code || stdout.String() != tc.stdout || (tc.stderr != "" && stderr.String() != tc.stderr) {
				t.Fatalf("exit %d (want %d)\nstdout:\n%s\nwant:\n%s\nstderr:\n%s\nwant:\n%s", code, tc.code, stdout, tc.stdout, stderr, tc.stderr)
			}
			if tc.code == exitRefused && !strings.HasPrefix(stderr.String(), "fencectl: REFUSE ") {
				t.Fatalf("stderr %q", stderr)
			}
		})
	}
}
