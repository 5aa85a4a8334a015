package resource

import (
	"testing"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fence/proof"
)

func TestFencedResource(t *testing.T) {
	r := New(true)
	if w := r.Write("k", 5, 1, ""); !w.Accepted || w.High != 5 {
		t.Fatalf("first write: %+v", w)
	}
	if w := r.Write("k", 5, 2, ""); !w.Accepted {
		t.Fatal("the same token must be admitted again")
	}
	if w := r.Write("k", 4, 3, ""); w.Accepted {
		t.Fatal("a lower token was admitted")
	}
	if rd := r.Read("k", 4, ""); rd.Accepted {
		t.Fatal("a read with a lower token was admitted")
	}
	rd := r.Read("k", 7, "")
	if !rd.Accepted || len(rd.Values) != 2 || rd.Values[1] != 2 {
		t.Fatalf("read: %+v", rd)
	}
	if r.High("k") != 7 {
		t.Fatal("a read with a higher token must raise the mark")
	}
	if w := r.Write("k", 6, 4, ""); w.Accepted {
		t.Fatal("a token below the read's was admitted")
	}
	if r.Write("other", 1, 1, "").Seq <= rd.Seq {
		t.Fatal("the resource's order must grow")
	}
}

func TestUncheckedResourceAdmitsAnything(t *testing.T) {
	r := New(false)
	r.Write("k", fence.Token(9), 1, "")
	if w := r.Write("k", 1, 2, ""); !w.Accepted || w.High != 9 {
		t.Fatalf("unchecked resource: %+v", w)
	}
}

func TestResourceRequiresProofs(t *testing.T) {
	s, err := proof.NewSigner()
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := proof.NewKeySet(s.Public())
	sign := func(tok fence.Token) string {
		p, _ := s.Sign(proof.Claims{Key: "k", Token: tok, Cluster: "c1"})
		return p
	}
	for _, skip := range []bool{false, true} {
		r := New(true)
		r.RequireProofs(ks, "c1", skip)
		if w := r.Write("k", 5, 1, sign(5)); !w.Accepted {
			t.Fatalf("skip=%v: a genuine proof: %+v", skip, w)
		}
		w := r.Write("k", fence.MaxToken, 2, sign(5))
		if skip {
			if !w.Accepted {
				t.Fatal("the skip-proof control refused a made-up token")
			}
			continue
		}
		if w.Accepted || w.ProofRefused != "proof_wrong_token" || r.High("k") != 5 {
			t.Fatalf("a made-up token with a replayed proof: %+v, high %s", w, r.High("k"))
		}
		if rd := r.Read("k", 5, ""); rd.Accepted || rd.ProofRefused != "proof_missing" {
			t.Fatalf("a read without a proof: %+v", rd)
		}
	}
}
