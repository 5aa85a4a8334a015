package checker

import (
	"strconv"
	"strings"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/jepsen-like/history"
)

// SplitPrefix separates the operations on keys with prefix from the others.
func SplitPrefix(ops []history.Op, prefix string) (others, matching []history.Op) {
	for _, o := range ops {
		if strings.HasPrefix(o.Key, prefix) {
			matching = append(matching, o)
		} else {
			others = append(others, o)
		}
	}
	return others, matching
}

// Churn checks the many-short-lived-keys workload, whose keys the cluster
// reclaims while they are idle and grants again later: tokens of each key
// are unique and strictly increase in grant order across every reclamation
// (token-order on these keys), and the final state holds no key below an
// acknowledged grant of it (a key absent from it was reclaimed, which the
// first check covers: its next grant must still be higher).
func Churn(ops []history.Op, final *Final, prefix string) []Result {
	order := TokenOrder(ops)
	order.Name = "token-order-churn"
	r := Result{Name: "reclaim-final-churn"}
	if final == nil || len(final.Keys) == 0 {
		r.violate("no final state of the cluster could be read after the heal")
		return []Result{order, r.finish("keys")}
	}
	acked := map[string]*ackedBefore{}
	for k, g := range grants(ops) {
		acked[k] = newAckedBefore(g)
	}
	absent := 0
	for node, keys := range final.Keys {
		cur := map[string]fence.Token{}
		for _, k := range keys {
			if strings.HasPrefix(k.Key, prefix) {
				cur[k.Key] = k.Token
			}
		}
		for key, a := range acked {
			m, mo := a.before(final.At)
			tok, present := cur[key]
			if m == 0 {
				continue
			}
			r.Checked++
			if !present {
				absent++
				continue
			}
			if tok < m {
				r.violate("final state through %s has %s at token %s, below acknowledged grant %s:\n  %s", node, key, history.Tok(tok), history.Tok(m), mo.Describe())
			}
		}
	}
	res := r.finish("final key states")
	if res.Pass {
		res.Summary += ", " + strconv.Itoa(absent) + " of them reclaimed"
	}
	return []Result{order, res}
}
