package fsm

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestPageIsTheSortedListingCut: a page is exactly the keys a full sorted
// listing would give from After on, cut at Limit, for any table and query.
func TestPageIsTheSortedListingCut(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := &applier{f: New(Config{})}
		get := func(n string) KeyState {
			k, ok := a.f.Get(n)
			if !ok {
				t.Fatalf("%q is not stored", n)
			}
			return k
		}
		names := rapid.SliceOfDistinct(rapid.StringMatching(`[ab]{0,2}/?[a-c]{1,3}`), rapid.ID).Draw(t, "names")
		for i, n := range names {
			a.at(1, Acquire{Key: n, Holder: fmt.Sprintf("h%d", i), TTL: time.Second})
			if i%3 == 0 {
				a.at(1, Release{Key: n, Holder: fmt.Sprintf("h%d", i), Token: get(n).Token})
			}
		}
		q := PageQuery{
			Prefix: rapid.StringMatching(`[ab]{0,2}`).Draw(t, "prefix"),
			After:  rapid.StringMatching(`[ab]{0,2}/?[a-c]{0,3}`).Draw(t, "after"),
			Limit:  rapid.IntRange(1, 8).Draw(t, "limit"),
		}
		heldOnly := rapid.Bool().Draw(t, "held only")
		if heldOnly {
			q.Keep = func(_ string, s State) bool { return s == Held }
		}
		var want []string
		for _, n := range names {
			k := get(n)
			if strings.HasPrefix(n, q.Prefix) && (q.After == "" || n > q.After) && (!heldOnly || k.State == Held) {
				want = append(want, n)
			}
		}
		slices.Sort(want)
		wantMore := len(want) > q.Limit
		if wantMore {
			want = want[:q.Limit]
		}
		page, more := a.f.Page(q)
		var got []string
		for _, k := range page {
			got = append(got, k.Key)
			if k != get(k.Key) {
				t.Fatalf("%s: paged %+v, stored %+v", k.Key, k, get(k.Key))
			}
		}
		if !slices.Equal(got, want) || more != wantMore {
			t.Fatalf("page %q more=%v, want %q more=%v", got, more, want, wantMore)
		}
	})
}
