package proof

import "testing"

func BenchmarkSign(b *testing.B) {
	s := mustSigner(b)
	c := sampleClaims()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sign(c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	s := mustSigner(b)
	ks := mustSet(b, s.Public())
	c := sampleClaims()
	p := mustSign(b, c, s)
	want := Expect{Key: c.Key, Token: c.Token, Cluster: c.Cluster}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Verify(p, ks, want); err != nil {
			b.Fatal(err)
		}
	}
}
