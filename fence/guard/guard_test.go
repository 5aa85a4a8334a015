package guard

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/fenced/fenced/fence"

	_ "modernc.org/sqlite"
)

// impl names a Guard implementation and opens a fresh, empty instance of it.
type impl struct {
	name string
	open func(t testing.TB) Guard
}

// impls lists every Guard, so each shared test runs against all of them.
func impls() []impl {
	return []impl{
		{"memory", func(testing.TB) Guard { return NewMemory() }},
		{"file", func(t testing.TB) Guard { return openFile(t, t.TempDir()) }},
		{"sqlite", func(t testing.TB) Guard { return openSQLite(t) }},
	}
}

func openFile(t testing.TB, dir string) *File {
	t.Helper()
	f, err := OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// openSQLiteDB opens a fresh SQLite database file that several connections can
// write: WAL, a busy timeout instead of SQLITE_BUSY, and IMMEDIATE transactions
// so that AdmitTx never has to upgrade a read lock.
func openSQLiteDB(t testing.TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fences.db")
	db, err := sql.Open("sqlite", "file:"+path+
		"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	return db
}

func openSQLite(t testing.TB) *SQL {
	t.Helper()
	s, err := NewSQL(openSQLiteDB(t), "fences")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// tk is the token of the seq-th grant of an epoch.
func tk(t testing.TB, epoch, seq uint64) fence.Token {
	t.Helper()
	tok, err := fence.Compose(epoch, seq)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestGuards(t *testing.T) {
	for _, im := range impls() {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			testGuardSuite(t, im.open(t))
		})
	}
}

// testGuardSuite is the behaviour every Guard shares. The steps run in order
// against one guard; after each, Highest of the step's key must be want.
func testGuardSuite(t *testing.T, g Guard) {
	ctx := context.Background()
	steps := []struct {
		name    string
		key     string
		tok     fence.Token
		wantErr error // nil, ErrStale, ErrInvalidToken or ErrInvalidKey
		want    fence.Token
	}{
		{"first token admitted", "a", tk(t, 1, 5), nil, tk(t, 1, 5)},
		{"higher admitted", "a", tk(t, 1, 6), nil, tk(t, 1, 6)},
		{"equal admitted", "a", tk(t, 1, 6), nil, tk(t, 1, 6)},
		{"lower refused", "a", tk(t, 1, 5), ErrStale, tk(t, 1, 6)},
		{"lowest refused", "a", tk(t, 1, 1), ErrStale, tk(t, 1, 6)},
		{"higher epoch with seq 1 admitted", "a", tk(t, 2, 1), nil, tk(t, 2, 1)},
		{"lower epoch with higher seq refused", "a", tk(t, 1, 1000), ErrStale, tk(t, 2, 1)},
		{"keys independent: lower token on other key", "b", tk(t, 1, 1), nil, tk(t, 1, 1)},
		{"keys independent: first key unchanged", "a", tk(t, 2, 1), nil, tk(t, 2, 1)},
		{"zero token refused", "a", 0, ErrInvalidToken, tk(t, 2, 1)},
		{"zero token not recorded for new key", "c", 0, ErrInvalidToken, 0},
		{"zero seq refused", "a", fence.Token(3 << 32), ErrInvalidToken, tk(t, 2, 1)},
		{"above 2^63-1 refused", "a", fence.Token(1 << 63), ErrInvalidToken, tk(t, 2, 1)},
		{"empty key refused", "", tk(t, 1, 1), ErrInvalidKey, 0},
		{"max token admitted, all 64 bits kept", "d", fence.MaxToken, nil, fence.MaxToken},
		{"one below max refused", "d", fence.MaxToken - 1, ErrStale, fence.MaxToken},
		{"odd key bytes", "x/../y\u00fc'\";--\n", tk(t, 7, 7), nil, tk(t, 7, 7)},
	}
	for _, st := range steps {
		err := g.Admit(ctx, st.key, st.tok)
		switch {
		case st.wantErr == nil && err != nil:
			t.Fatalf("%s: Admit(%q, %s) = %v, want admitted", st.name, st.key, st.tok, err)
		case st.wantErr != nil && !errors.Is(err, st.wantErr):
			t.Fatalf("%s: Admit(%q, %s) = %v, want %v", st.name, st.key, st.tok, err, st.wantErr)
		}
		if errors.Is(err, ErrStale) {
			var se *StaleError
			if !errors.As(err, &se) {
				t.Fatalf("%s: %v is not a *StaleError", st.name, err)
			}
			if se.Key != st.key || se.Token != st.tok || se.Highest != st.want {
				t.Fatalf("%s: StaleError %+v, want key %q token %s highest %s", st.name, se, st.key, st.tok, st.want)
			}
		}
		if st.key == "" {
			if _, err := g.Highest(ctx, ""); !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("%s: Highest(\"\") = %v, want ErrInvalidKey", st.name, err)
			}
			continue
		}
		if got, err := g.Highest(ctx, st.key); err != nil || got != st.want {
			t.Fatalf("%s: Highest(%q) = %s, %v; want %s", st.name, st.key, got, err, st.want)
		}
	}
	if got, err := g.Highest(ctx, "never-admitted"); err != nil || got != 0 {
		t.Fatalf("Highest of an unknown key = %s, %v; want 0", got, err)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := g.Admit(cancelled, "e", tk(t, 9, 9)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Admit with a cancelled context = %v, want context.Canceled", err)
	}
	if got, err := g.Highest(ctx, "e"); err != nil || got != 0 {
		t.Fatalf("a cancelled Admit recorded %s, %v", got, err)
	}
}

func TestStaleError(t *testing.T) {
	var err error = &StaleError{Key: "k", Token: 5, Highest: 7}
	if !errors.Is(err, ErrStale) {
		t.Fatal("errors.Is(*StaleError, ErrStale) is false")
	}
	wrapped := errors.Join(errors.New("writing row"), err)
	if !errors.Is(wrapped, ErrStale) {
		t.Fatal("a wrapped *StaleError does not match ErrStale")
	}
	if errors.Is(err, ErrInvalidToken) {
		t.Fatal("a *StaleError matches ErrInvalidToken")
	}
	if got, want := err.Error(), `stale fencing token: key "k": token 5 is lower than admitted token 7`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}
