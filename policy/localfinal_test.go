package policy

import (
	"errors"
	"fmt"
	"testing"
)

// Promise: net/http's local failures are read from the one table of its
// texts, and are final: not retried, not counted against the host.
func TestLocalFinal(t *testing.T) {
	over := errors.New("net/http: server response headers exceeded 1048576 bytes; aborted")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"headers too large", over, true},
		{"wrapped", fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", over), true},
		{"no number", errors.New("net/http: server response headers exceeded  bytes; aborted"), false},
		{"inside a longer message", errors.New("proxy: net/http: server response headers exceeded 10 bytes; aborted"), false},
		{"a not-processed row", errors.New("http: server closed idle connection"), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		_, ok := LocalFinal(tt.err)
		if ok != tt.want {
			t.Errorf("%s: LocalFinal(%v) = %v, want %v", tt.name, tt.err, ok, tt.want)
		}
		if !tt.want || tt.err == nil {
			continue
		}
		if d := DefaultClassifier(Outcome{Err: tt.err, Attempt: 1}); d.Retry {
			t.Errorf("%s: DefaultClassifier = %+v, want no retry", tt.name, d)
		}
		if v := Judge(Outcome{Err: tt.err}); v.Host != HostIgnored {
			t.Errorf("%s: Judge().Host = %v, want HostIgnored", tt.name, v.Host)
		}
		if _, ok := NotProcessed(tt.err); ok {
			t.Errorf("%s: NotProcessed = true, want false", tt.name)
		}
	}
}
