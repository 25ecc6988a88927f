package idempotency

import "testing"

// Promise: an entry of Hosts with a path vouches for that route only: its
// host, and paths that are the route's or lie beneath it, segment by
// segment, once cleaned.
func TestMatchesRoute(t *testing.T) {
	completions := []string{"api.openai.com/v1/chat/completions"}
	tests := []struct {
		hosts []string
		host  string
		path  string
		want  bool
	}{
		{completions, "api.openai.com", "/v1/chat/completions", true},
		{completions, "API.openai.com:443", "/v1/chat/completions", true},
		{completions, "api.openai.com", "/v1/chat/completions/", true},
		{completions, "api.openai.com", "/v1/chat/completions/abc", true},
		{completions, "api.openai.com", "/v1/chat//completions", true},
		{completions, "api.openai.com", "/v1/files", false},
		{completions, "api.openai.com", "/v1/batches", false},
		{completions, "api.openai.com", "/v1/fine_tuning/jobs", false},
		{completions, "api.openai.com", "/v1/chat/completionsx", false},
		{completions, "api.openai.com", "/v1/chat/completions/../../files", false},
		{completions, "api.openai.com", "/V1/chat/completions", false}, // paths are case-sensitive
		{completions, "api.openai.com", "", false},
		{completions, "evil.test", "/v1/chat/completions", false},
		{[]string{"api.openai.com/v1/chat/completions/"}, "api.openai.com", "/v1/chat/completions", true},
		{[]string{"*.example.com/pay"}, "eu.example.com", "/pay/1", true},
		{[]string{"*.example.com/pay"}, "example.com", "/pay/1", false},
		{[]string{"api.test/"}, "api.test", "/anything", true}, // a route of "/" is the whole host
		{[]string{"api.test"}, "api.test", "/anything", true},
		{[]string{"api.test/v1", "api.test/v2"}, "api.test", "/v2/x", true},
		{nil, "api.test", "/", false},
	}
	for _, tt := range tests {
		o := Options{Hosts: tt.hosts}
		if got := o.Matches(tt.host, tt.path); got != tt.want {
			t.Errorf("Options{Hosts: %q}.Matches(%q, %q) = %v, want %v", tt.hosts, tt.host, tt.path, got, tt.want)
		}
	}
	// A route does not vouch for its whole host.
	if o := (Options{Hosts: completions}); o.MatchesHost("api.openai.com") {
		t.Errorf("Options{Hosts: %q}.MatchesHost(api.openai.com) = true, want false: a route is not its host", completions)
	}
}
