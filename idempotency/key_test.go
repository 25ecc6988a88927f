package idempotency

import (
	"context"
	"regexp"
	"sync"
	"testing"
)

var uuid4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewKeyIsUniqueUUIDv4(t *testing.T) {
	var mu sync.Mutex
	seen := make(map[string]bool)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 2000 {
				k := NewKey()
				if !uuid4.MatchString(k) {
					t.Errorf("NewKey() = %q, want a UUIDv4", k)
				}
				mu.Lock()
				if seen[k] {
					t.Errorf("NewKey() = %q twice", k)
				}
				seen[k] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

func TestWithKey(t *testing.T) {
	tests := []struct {
		ctx    context.Context
		want   string
		wantOK bool
	}{
		{context.Background(), "", false},
		{WithKey(context.Background(), "order-1"), "order-1", true},
		{WithKey(context.Background(), ""), "", false},
	}
	for i, tt := range tests {
		got, ok := KeyFromContext(tt.ctx)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("step %d: KeyFromContext = (%q, %v), want (%q, %v)", i, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		o      Options
		method string
		header string
		want   bool
	}{
		{Options{}, "POST", "Idempotency-Key", true},
		{Options{}, "PATCH", "Idempotency-Key", true},
		{Options{}, "PUT", "Idempotency-Key", false},
		{Options{Methods: []string{"PUT"}, Header: "X-Key"}, "PUT", "X-Key", true},
		{Options{Methods: []string{}}, "POST", "Idempotency-Key", false},
	}
	for i, tt := range tests {
		if got := tt.o.Applies(tt.method); got != tt.want {
			t.Errorf("step %d: Applies(%s) = %v, want %v", i, tt.method, got, tt.want)
		}
		if got := tt.o.HeaderName(); got != tt.header {
			t.Errorf("step %d: HeaderName() = %q, want %q", i, got, tt.header)
		}
	}
}

func BenchmarkNewKey(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = NewKey()
		}
	})
}
