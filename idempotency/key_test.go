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

func TestMatchesHost(t *testing.T) {
	tests := []struct {
		hosts []string
		host  string
		want  bool
	}{
		{nil, "api.openai.com", false},
		{[]string{"api.openai.com"}, "api.openai.com", true},
		{[]string{"api.openai.com"}, "api.openai.com:443", true},
		{[]string{"api.openai.com"}, "API.OpenAI.com:8443", true},
		{[]string{"API.OPENAI.COM"}, "api.openai.com", true},
		{[]string{"api.openai.com"}, "api.openai.com.", true},
		{[]string{"api.openai.com:443"}, "api.openai.com:80", true},
		{[]string{"api.openai.com"}, "evil-api.openai.com", false},
		{[]string{"api.openai.com"}, "api.openai.com.evil.test", false},
		{[]string{"api.openai.com"}, "openai.com", false},
		{[]string{"*.example.com"}, "a.example.com", true},
		{[]string{"*.example.com"}, "a.b.Example.COM:8080", true},
		{[]string{"*.example.com"}, "example.com", false},
		{[]string{"*.example.com"}, "badexample.com", false},
		{[]string{"*.example.com"}, "eu.example.com.", true},
		{[]string{"*.example.com."}, "eu.example.com", true},
		{[]string{"*.example.com:443"}, "eu.example.com:443", true}, // a pattern's port, as a hostname's, is ignored
		{[]string{"*.example.com:443"}, "eu.example.com", true},
		{[]string{"*.example.com:443"}, "example.com:443", false},
		{[]string{"*"}, "anything.test:1", true},
		{[]string{"*"}, "", true},
		{[]string{"127.0.0.1"}, "127.0.0.1:8080", true},
		{[]string{"::1"}, "[::1]:8080", true},
		{[]string{"[::1]"}, "[::1]:8080", true},
		{[]string{"::1"}, "[::2]:8080", false},
		{[]string{"a.test", "b.test"}, "b.test:1", true},
		{[]string{""}, "", false},
		{[]string{""}, "a.test", false},
	}
	for i, tt := range tests {
		o := Options{Hosts: tt.hosts}
		if got := o.MatchesHost(tt.host); got != tt.want {
			t.Errorf("step %d: Options{Hosts: %q}.MatchesHost(%q) = %v, want %v", i, tt.hosts, tt.host, got, tt.want)
		}
	}
}
