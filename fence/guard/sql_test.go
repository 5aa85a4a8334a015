package guard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fenced/fenced/fence"
)

func TestSQLTableName(t *testing.T) {
	db := openSQLiteDB(t)
	for _, name := range []string{"fences", "_f", "Fence_2", strings.Repeat("a", 63)} {
		if _, err := NewSQL(db, name); err != nil {
			t.Errorf("NewSQL(%q) = %v, want accepted", name, err)
		}
	}
	bad := []string{"", "2fences", "fen ces", "fences;drop table x", `"fences"`, "a.b", "f-1", "fénce", strings.Repeat("a", 64)}
	for _, name := range bad {
		if _, err := NewSQL(db, name); err == nil {
			t.Errorf("NewSQL(%q) accepted a name that is not a plain identifier", name)
		}
	}
}

func TestSQLKeyText(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	for _, key := range []string{"nul\x00byte", "bad\xffutf8"} {
		if err := s.Admit(ctx, key, tk(t, 1, 1)); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Admit(%q) = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Highest(ctx, key); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Highest(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
}

func TestSQLPlaceholders(t *testing.T) {
	q, err := NewSQL(nil, "fences")
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewSQL(nil, "fences", DollarPlaceholders())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"update": {q.updateQ, `UPDATE fences SET fence = $1 WHERE "key" = $2 AND fence <= $3`},
		"insert": {q.insertQ, `INSERT INTO fences ("key", fence) VALUES ($1, $2) ON CONFLICT ("key") DO NOTHING`},
		"select": {q.selectQ, `SELECT fence FROM fences WHERE "key" = $1`},
	}
	got := map[string]string{"update": d.updateQ, "insert": d.insertQ, "select": d.selectQ}
	for name, w := range want {
		if got[name] != w[1] {
			t.Errorf("%s with DollarPlaceholders:\n got %s\nwant %s", name, got[name], w[1])
		}
		if strings.Count(w[0], "?") != strings.Count(w[1], "$") || strings.Contains(w[0], "$") {
			t.Errorf("%s with ? placeholders does not match: %s", name, w[0])
		}
	}
}

// TestSQLAdmitTx checks that the fence moves with the caller's transaction:
// raised on commit, untouched on rollback, and that a stale token is refused
// inside the transaction before the caller writes.
func TestSQLAdmitTx(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	if _, err := s.db.Exec(`CREATE TABLE rows (k TEXT PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	write := func(tx *sql.Tx, v string) error {
		_, err := tx.Exec(`INSERT INTO rows (k, v) VALUES ('r', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, v)
		return err
	}
	rowValue := func() string {
		var v string
		if err := s.db.QueryRow(`SELECT v FROM rows WHERE k = 'r'`).Scan(&v); err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		return v
	}

	// Committed: fence and row together.
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AdmitTx(ctx, tx, "r", tk(t, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := write(tx, "by 1/2"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// Rolled back: neither the fence nor the row move.
	tx, err = s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AdmitTx(ctx, tx, "r", tk(t, 1, 9)); err != nil {
		t.Fatal(err)
	}
	if err := write(tx, "by 1/9"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if h, _ := s.Highest(ctx, "r"); h != tk(t, 1, 2) || rowValue() != "by 1/2" {
		t.Fatalf("after rollback: highest %s, row %q; want %s, %q", h, rowValue(), tk(t, 1, 2), "by 1/2")
	}

	// Stale inside a transaction: refused before the caller's write.
	tx, err = s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.AdmitTx(ctx, tx, "r", tk(t, 1, 1))
	var se *StaleError
	if !errors.As(err, &se) || se.Highest != tk(t, 1, 2) {
		t.Fatalf("stale AdmitTx = %v, want a StaleError with highest %s", err, tk(t, 1, 2))
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	// AdmitFunc: a failing write rolls the fence back with it.
	boom := errors.New("boom")
	err = s.AdmitFunc(ctx, "r", tk(t, 2, 1), func(tx *sql.Tx) error {
		if err := write(tx, "by 2/1"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("AdmitFunc with a failing write = %v, want boom", err)
	}
	if h, _ := s.Highest(ctx, "r"); h != tk(t, 1, 2) || rowValue() != "by 1/2" {
		t.Fatalf("after failed write: highest %s, row %q", h, rowValue())
	}
	err = s.AdmitFunc(ctx, "r", tk(t, 2, 1), func(tx *sql.Tx) error { return write(tx, "by 2/1") })
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := s.Highest(ctx, "r"); h != tk(t, 2, 1) || rowValue() != "by 2/1" {
		t.Fatalf("after write: highest %s, row %q", h, rowValue())
	}
	called := false
	err = s.AdmitFunc(ctx, "r", tk(t, 1, 5), func(*sql.Tx) error { called = true; return nil })
	if !errors.Is(err, ErrStale) || called {
		t.Fatalf("stale AdmitFunc = %v (write called: %v), want ErrStale and no write", err, called)
	}
}

// TestSQLConcurrentAdmitTx runs the atomic-write checker through AdmitFunc,
// with each write appended to a log table in the same transaction. The log's
// row order is the commit order, so a stale write stored after a newer one
// shows as a token that goes down.
func TestSQLConcurrentAdmitTx(t *testing.T) {
	s := openSQLite(t)
	if _, err := s.db.Exec(`CREATE TABLE log (id INTEGER PRIMARY KEY AUTOINCREMENT, k TEXT NOT NULL, tok BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	// runWrites' write closure feeds an in-memory shadow log, used only to
	// count; the log table written in the transaction is what is checked.
	admit := func(ctx context.Context, key string, tok fence.Token, write func() error) error {
		return s.AdmitFunc(ctx, key, tok, func(tx *sql.Tx) error {
			if err := write(); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO log (k, tok) VALUES (?, ?)`, key, int64(tok))
			return err
		})
	}
	r := &resourceLog{logs: map[string][]fence.Token{}}
	n, err := runWrites(admit, r.write, loadConfig{keys: 2, workers: 6, ops: 50})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.db.Query(`SELECT k, tok FROM log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	logs := map[string][]fence.Token{}
	total := 0
	for rows.Next() {
		var k string
		var tok int64
		if err := rows.Scan(&k, &tok); err != nil {
			t.Fatal(err)
		}
		logs[k] = append(logs[k], fence.Token(tok))
		total++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, v := range checkLogs(logs) {
		t.Error(v)
	}
	if total != n || n == 0 {
		t.Fatalf("%d admissions succeeded, %d rows stored", n, total)
	}
	t.Logf("%d writes committed", n)
}

// TestSQLExistingTable checks the guard works on a table created by hand with
// the documented DDL, and reads back large values exactly.
func TestSQLExistingTable(t *testing.T) {
	ctx := context.Background()
	db := openSQLiteDB(t)
	if _, err := db.Exec(`CREATE TABLE my_fences ("key" TEXT PRIMARY KEY, fence BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s, err := NewSQL(db, "my_fences")
	if err != nil {
		t.Fatal(err)
	}
	big := tk(t, fence.MaxEpoch, fence.MaxSeq)
	if err := s.Admit(ctx, "k", big-1); err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(ctx, "k", big); err != nil {
		t.Fatal(err)
	}
	var raw int64
	if err := db.QueryRow(`SELECT fence FROM my_fences WHERE "key" = 'k'`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if fence.Token(raw) != big || fmt.Sprint(raw) != big.String() {
		t.Fatalf("stored %d, want %s", raw, big)
	}
}
