package guard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fence/guard"

	_ "modernc.org/sqlite"
)

func ExampleMemory() {
	ctx := context.Background()
	g := guard.NewMemory()
	newer, _ := fence.Parse("4294967303")
	older, _ := fence.Parse("4294967302")

	fmt.Println(g.Admit(ctx, "cache/users", newer))
	fmt.Println(g.Admit(ctx, "cache/users", newer)) // the holder writes again
	err := g.Admit(ctx, "cache/users", older)
	fmt.Println(errors.Is(err, guard.ErrStale))
	var se *guard.StaleError
	if errors.As(err, &se) {
		fmt.Println(se.Highest)
	}
	// Output:
	// <nil>
	// <nil>
	// true
	// 4294967303
}

func ExampleFile_AdmitFunc() {
	dir, err := os.MkdirTemp("", "fences")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	g, err := guard.OpenFile(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	tok, _ := fence.Parse("8589934593") // epoch 2, seq 1
	// The token is durable before the write runs, and no other admission of
	// the key can run in between.
	err = g.AdmitFunc(context.Background(), "deploy/prod", tok, func() error {
		fmt.Println("writing with", tok)
		return nil
	})
	fmt.Println(err)
	// Output:
	// writing with 8589934593
	// <nil>
}

func ExampleSQL_AdmitTx() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file::memory:?_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	g, err := guard.NewSQL(db, "fences")
	if err != nil {
		log.Fatal(err)
	}
	if err := g.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance BIGINT)`); err != nil {
		log.Fatal(err)
	}

	tok, _ := fence.Parse("4294967297")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := g.AdmitTx(ctx, tx, "account/42", tok); err != nil {
		tx.Rollback()
		log.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO accounts (id, balance) VALUES (42, 100)`); err != nil {
		tx.Rollback()
		log.Fatal(err)
	}
	fmt.Println(tx.Commit())
	h, _ := g.Highest(ctx, "account/42")
	fmt.Println(h)
	// Output:
	// <nil>
	// 4294967297
}

func ExampleMiddleware() {
	g := guard.NewMemory()
	mux := http.NewServeMux()
	mux.Handle("PUT /items/{id}", guard.Middleware(g, guard.KeyFromPathValue("id"),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok, _ := guard.TokenFrom(r.Context())
			fmt.Fprintf(w, "stored with %s\n", tok)
		})))

	for _, tok := range []string{"4294967303", "4294967302", "0x10"} {
		req := httptest.NewRequest(http.MethodPut, "/items/42", nil)
		req.Header.Set(guard.HeaderName, tok)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	// Output:
	// 200 stored with 4294967303
	// 409 {"code":"stale_token","message":"stale fencing token: key \"42\": token 4294967302 is lower than admitted token 4294967303","key":"42","token":"4294967302","highest":"4294967303"}
	// 400 {"code":"malformed_token","message":"Fencing-Token header: malformed token: leading zero"}
}
