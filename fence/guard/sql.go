package guard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fenced/fenced/fence"
)

// SQL is a Guard that keeps the highest tokens in a database table with two
// columns, "key" TEXT PRIMARY KEY and fence BIGINT NOT NULL:
//
//	CREATE TABLE fences ("key" TEXT PRIMARY KEY, fence BIGINT NOT NULL);
//
// An admission is one conditional statement,
//
//	UPDATE fences SET fence = ? WHERE "key" = ? AND fence <= ?
//
// which the database executes atomically, plus, for a key not yet in the table,
// INSERT ... ON CONFLICT ("key") DO NOTHING. Both SQLite (3.24 and later) and
// PostgreSQL (9.5 and later) accept these statements; tokens are stored as
// signed 64-bit integers, which every token fits. Keys are stored as TEXT, so
// they must be valid UTF-8 without NUL bytes (PostgreSQL refuses both);
// others are refused with ErrInvalidKey on every database alike.
//
// Use AdmitTx or AdmitFunc to check the fence and write your own rows in one
// transaction: the fence row stays locked until the transaction ends, so no
// other holder of the key can write in between, and if the transaction rolls
// back the fence is not raised either.
type SQL struct {
	db    *sql.DB
	table string

	createQ, updateQ, insertQ, selectQ string
}

var _ Guard = (*SQL)(nil)

// SQLOption configures NewSQL.
type SQLOption func(*sqlConfig)

type sqlConfig struct {
	dollar bool
}

// DollarPlaceholders makes the guard write $1, $2, ... placeholders, as
// PostgreSQL drivers (pgx, lib/pq) require, instead of SQLite's ?.
func DollarPlaceholders() SQLOption {
	return func(c *sqlConfig) { c.dollar = true }
}

// NewSQL returns a guard that keeps its fences in table. The name must be a
// plain identifier (ASCII letters, digits and underscores, not starting with a
// digit, at most 63 bytes) because it is written into the statements; it is
// not quoted, so PostgreSQL folds it to lower case as usual. Create the table
// with CreateTable or with the DDL in the type's documentation.
func NewSQL(db *sql.DB, table string, opts ...SQLOption) (*SQL, error) {
	if !isIdentifier(table) {
		return nil, fmt.Errorf("guard: table name %q is not a plain SQL identifier", table)
	}
	var c sqlConfig
	for _, o := range opts {
		o(&c)
	}
	p := func(i int) string {
		if c.dollar {
			return fmt.Sprintf("$%d", i)
		}
		return "?"
	}
	return &SQL{
		db:    db,
		table: table,
		createQ: `CREATE TABLE IF NOT EXISTS ` + table +
			` ("key" TEXT PRIMARY KEY, fence BIGINT NOT NULL)`,
		updateQ: `UPDATE ` + table + ` SET fence = ` + p(1) +
			` WHERE "key" = ` + p(2) + ` AND fence <= ` + p(3),
		insertQ: `INSERT INTO ` + table + ` ("key", fence) VALUES (` + p(1) + `, ` + p(2) +
			`) ON CONFLICT ("key") DO NOTHING`,
		selectQ: `SELECT fence FROM ` + table + ` WHERE "key" = ` + p(1),
	}, nil
}

// isIdentifier reports whether s is safe to write unquoted into a statement.
func isIdentifier(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// CreateTable creates the guard's table if it does not exist yet.
func (s *SQL) CreateTable(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, s.createQ); err != nil {
		return fmt.Errorf("guard: create table %s: %w", s.table, err)
	}
	return nil
}

// execer is what *sql.DB and *sql.Tx share.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Admit implements Guard. Each statement it runs is atomic on its own, so it
// needs no transaction; to write your own rows atomically with the check, use
// AdmitTx or AdmitFunc instead.
func (s *SQL) Admit(ctx context.Context, key string, tok fence.Token) error {
	return s.admit(ctx, s.db, key, tok)
}

// AdmitTx admits tok for key inside the caller's transaction. Write your rows
// in the same transaction after it returns nil and commit: the fence row stays
// locked until the end of the transaction, so the check and the write are one
// step, and a rollback undoes the new highest along with the write.
//
// On SQLite, begin the transaction as IMMEDIATE (modernc.org/sqlite and
// mattn/go-sqlite3 accept _txlock=immediate in the DSN) or call AdmitTx before
// any read, otherwise upgrading the read lock can fail with SQLITE_BUSY. On
// PostgreSQL under REPEATABLE READ or SERIALIZABLE, a concurrent admission of
// the same key aborts one transaction with a serialization error: roll back and
// retry it; that error never admits a stale token.
func (s *SQL) AdmitTx(ctx context.Context, tx *sql.Tx, key string, tok fence.Token) error {
	return s.admit(ctx, tx, key, tok)
}

// AdmitFunc runs AdmitTx and write in one new transaction and commits it only
// when both succeed, so the fence is raised exactly when the write is stored.
// write's error is returned unchanged.
func (s *SQL) AdmitFunc(ctx context.Context, key string, tok fence.Token, write func(*sql.Tx) error) (err error) {
	if err := checkAdmit(ctx, key, tok); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("guard: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the original error matters more
		}
	}()
	if err := s.AdmitTx(ctx, tx, key, tok); err != nil {
		return err
	}
	if err := write(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("guard: commit: %w", err)
	}
	return nil
}

// admit runs the conditional update, the insert for a new key, and the update
// again when a concurrent insert won the race. Rows are never deleted, so once
// the row exists the update alone decides.
func (s *SQL) admit(ctx context.Context, db execer, key string, tok fence.Token) error {
	if err := checkAdmit(ctx, key, tok); err != nil {
		return err
	}
	if err := checkTextKey(key); err != nil {
		return err
	}
	v := int64(tok) // checkToken guarantees it fits
	ok, err := s.exec(ctx, db, s.updateQ, v, key, v)
	if err != nil || ok {
		return err
	}
	if ok, err = s.exec(ctx, db, s.insertQ, key, v); err != nil || ok {
		return err
	}
	if ok, err = s.exec(ctx, db, s.updateQ, v, key, v); err != nil || ok {
		return err
	}
	cur, err := s.highest(ctx, db, key)
	if err != nil {
		return err
	}
	return &StaleError{Key: key, Token: tok, Highest: cur}
}

// checkTextKey refuses keys a TEXT column cannot hold on every database.
func checkTextKey(key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0 {
		return fmt.Errorf("%w: %q is not UTF-8 text without NUL bytes", ErrInvalidKey, key)
	}
	return nil
}

// exec runs a statement and reports whether it changed (or matched) one row.
// Both SQLite and PostgreSQL count a row whose fence is set to its own value.
func (s *SQL) exec(ctx context.Context, db execer, q string, args ...any) (bool, error) {
	res, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("guard: %s: %w", strings.Fields(q)[0], err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("guard: rows affected: %w", err)
	}
	return n == 1, nil
}

// Highest implements Guard.
func (s *SQL) Highest(ctx context.Context, key string) (fence.Token, error) {
	if err := checkTextKey(key); err != nil {
		return 0, err
	}
	return s.highest(ctx, s.db, key)
}

func (s *SQL) highest(ctx context.Context, db execer, key string) (fence.Token, error) {
	var v int64
	err := db.QueryRowContext(ctx, s.selectQ, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("guard: select: %w", err)
	}
	if v <= 0 {
		return 0, fmt.Errorf("guard: corrupt fence %d for key %q in %s", v, key, s.table)
	}
	return fence.Token(v), nil
}
