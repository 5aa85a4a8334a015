// Command stock is the classic fencing example: reserve the last item in
// stock. The holder takes a lease on the item, checks it still holds it, and
// writes the reservation through a SQL fence in the same transaction, so a
// holder that froze after its check and woke up after someone else's grant is
// refused by the database — whatever it believes about its lease.
//
//	go run ./examples/stock --db stock.db --init 1          # one item in stock
//	go run ./examples/stock --db stock.db --holder alice    # alice reserves it
//
// With --wait-for-go, the holder stops after its lease check and writes only
// when a line arrives on standard input: the window in which a real process
// is paused by GC, SIGSTOP or a slow disk.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	_ "modernc.org/sqlite"

	"github.com/fenced/fenced/client"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fence/guard"
)

// Exit codes a script (or a test) can act on.
const (
	exitOK      = 0
	exitError   = 1
	exitRefused = 3 // the fence refused a stale token: nothing was written
	exitSoldOut = 4
)

func main() {
	var (
		endpoints = pflag.String("endpoints", envOr("FENCE_ENDPOINTS", "127.0.0.1:7700"), "fenced endpoints")
		dbPath    = pflag.String("db", "stock.db", "SQLite database of the shop")
		holder    = pflag.String("holder", "", "who reserves the item")
		item      = pflag.String("item", "widget", "the item to reserve")
		initQty   = pflag.Int("init", -1, "create the database with this many items and exit")
		ttl       = pflag.Duration("ttl", 2*time.Second, "lease TTL")
		wait      = pflag.Duration("wait", 30*time.Second, "how long to wait for the lock")
		waitForGo = pflag.Bool("wait-for-go", false, "after the lease check, wait for a line on stdin before writing")
		noFence   = pflag.Bool("no-fence", false, "write without checking the token (to see what fencing prevents)")
	)
	pflag.Parse()
	ctx := context.Background()
	if *initQty >= 0 {
		if err := withDB(*dbPath, func(db *sql.DB) error { return initDB(ctx, db, *item, *initQty) }); err != nil {
			fail(exitError, err)
		}
		return
	}
	if *holder == "" {
		fail(exitError, errors.New("--holder is required"))
	}
	os.Exit(reserve(ctx, *dbPath, strings.Split(*endpoints, ","), *holder, *item, *ttl, *wait, *waitForGo, *noFence))
}

// withDB opens the database for one step and closes it after, so a holder
// that freezes between its steps keeps no file lock that stalls the others.
func withDB(path string, f func(*sql.DB) error) error {
	db, err := openDB(path)
	if err != nil {
		return err
	}
	ferr := f(db)
	return errors.Join(ferr, db.Close())
}

func reserve(ctx context.Context, dbPath string, endpoints []string, holder, item string, ttl, wait time.Duration, waitForGo, noFence bool) int {
	c := client.New(endpoints)
	lease, err := c.Lease(ctx, "stock/"+item, holder, client.LeaseOptions{TTL: ttl, Wait: wait})
	if err != nil {
		fail(exitError, fmt.Errorf("acquire: %w", err))
	}
	defer lease.Release(context.Background())
	fmt.Printf("acquired %s token %s\n", item, lease.Token())
	select {
	case <-lease.Done():
		fail(exitError, fmt.Errorf("lease lost before the write: %w", lease.Err()))
	default:
	}
	// The holder reads under its lease and decides: the read-modify-write
	// that a pause splits in two.
	var qty int
	if err := withDB(dbPath, func(db *sql.DB) error {
		return db.QueryRowContext(ctx, `SELECT qty FROM stock WHERE item = ?`, item).Scan(&qty)
	}); err != nil {
		fail(exitError, err)
	}
	if qty == 0 {
		fmt.Println("sold out")
		return exitSoldOut
	}
	fmt.Println("lease checked")
	if waitForGo {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	}
	// From here on the holder acts on its belief; only the fence protects.
	err = withDB(dbPath, func(db *sql.DB) error { return write(ctx, db, holder, item, qty-1, lease.Token(), noFence) })
	switch {
	case errors.Is(err, guard.ErrStale):
		fmt.Printf("refused: %v\n", err)
		return exitRefused
	case err != nil:
		fail(exitError, err)
	}
	fmt.Printf("reserved %s for %s\n", item, holder)
	return exitOK
}

// write checks the fence and stores the holder's decision in one transaction.
func write(ctx context.Context, db *sql.DB, holder, item string, newQty int, tok fence.Token, noFence bool) error {
	store := func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE stock SET qty = ? WHERE item = ?`, newQty, item); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO reservations (item, holder, token) VALUES (?, ?, ?)`, item, holder, int64(tok))
		return err
	}
	if noFence {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := store(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	g, err := guard.NewSQL(db, "fences")
	if err != nil {
		return err
	}
	return g.AdmitFunc(ctx, "stock/"+item, tok, store)
}

func openDB(path string) (*sql.DB, error) {
	// IMMEDIATE transactions take the write lock up front, as the guard's
	// documentation advises for SQLite.
	return sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)")
}

func initDB(ctx context.Context, db *sql.DB, item string, qty int) error {
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS stock (item TEXT PRIMARY KEY, qty INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS reservations (item TEXT, holder TEXT, token INTEGER)`,
		`CREATE TABLE IF NOT EXISTS fences ("key" TEXT PRIMARY KEY, fence BIGINT NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	_, err := db.ExecContext(ctx, `INSERT INTO stock (item, qty) VALUES (?, ?) ON CONFLICT (item) DO UPDATE SET qty = excluded.qty`, item, qty)
	return err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "stock:", err)
	os.Exit(code)
}
