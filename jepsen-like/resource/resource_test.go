package resource

import (
	"testing"

	"github.com/fenced/fenced/fence"
)

func TestFencedResource(t *testing.T) {
	r := New(true)
	if w := r.Write("k", 5, 1); !w.Accepted || w.High != 5 {
		t.Fatalf("first write: %+v", w)
	}
	if w := r.Write("k", 5, 2); !w.Accepted {
		t.Fatal("the same token must be admitted again")
	}
	if w := r.Write("k", 4, 3); w.Accepted {
		t.Fatal("a lower token was admitted")
	}
	if rd := r.Read("k", 4); rd.Accepted {
		t.Fatal("a read with a lower token was admitted")
	}
	rd := r.Read("k", 7)
	if !rd.Accepted || len(rd.Values) != 2 || rd.Values[1] != 2 {
		t.Fatalf("read: %+v", rd)
	}
	if r.High("k") != 7 {
		t.Fatal("a read with a higher token must raise the mark")
	}
	if w := r.Write("k", 6, 4); w.Accepted {
		t.Fatal("a token below the read's was admitted")
	}
	if r.Write("other", 1, 1).Seq <= rd.Seq {
		t.Fatal("the resource's order must grow")
	}
}

func TestUncheckedResourceAdmitsAnything(t *testing.T) {
	r := New(false)
	r.Write("k", fence.Token(9), 1)
	if w := r.Write("k", 1, 2); !w.Accepted || w.High != 9 {
		t.Fatalf("unchecked resource: %+v", w)
	}
}
