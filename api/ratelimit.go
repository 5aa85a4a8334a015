package api

import (
	"sync"
	"time"
)

// rateLimiter is a token bucket per client (identity or IP address): each
// bucket holds up to burst requests and refills at rate per second. Buckets
// that have refilled completely carry no information and are dropped, so
// the table stays as small as the set of recently busy clients.
type rateLimiter struct {
	rate  float64
	burst float64

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets bounds the table: past it, full buckets are swept at once.
const maxBuckets = 1 << 16

func newRateLimiter(rate float64, burst int) *rateLimiter {
	if rate <= 0 {
		return nil
	}
	if burst < 1 {
		burst = max(1, int(rate))
	}
	return &rateLimiter{rate: rate, burst: float64(burst), buckets: map[string]*bucket{}, swept: time.Now()}
}

// allow takes one request from key's bucket. When the bucket is empty it
// returns false and how long until a request would be allowed.
func (l *rateLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxBuckets || now.Sub(l.swept) > time.Minute {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, max(wait, time.Millisecond)
}

// sweep drops the buckets that are full by now. If every bucket is busy and
// the table is still at its bound, it is cleared: forgetting some clients'
// debts is better than growing without end.
func (l *rateLimiter) sweep(now time.Time) {
	l.swept = now
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) >= maxBuckets {
		clear(l.buckets)
	}
}

// charge takes n more requests from key's bucket, for the items of a batch
// that was allowed as one request. The bucket may go below zero: the debt
// holds back the client's next requests until it is refilled, so a batch
// counts as many requests as it has items, however large the burst, yet a
// batch already admitted is never refused halfway.
func (l *rateLimiter) charge(key string, n int, now time.Time) {
	if l == nil || n <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate) - float64(n)
	b.last = now
}
