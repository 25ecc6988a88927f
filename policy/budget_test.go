package policy

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hosts"
)

func TestBudgetAllFailing(t *testing.T) {
	tests := []struct {
		name  string
		b     *Budget
		ops   int
		tries int // attempts each operation wants
		want  int // retries allowed
	}{
		{"defaults", &Budget{}, 1000, 4, 10 + 200},
		{"ratio 0.1 floor 5", &Budget{Ratio: 0.1, MinRetries: 5}, 1000, 4, 5 + 100},
		{"quiet client keeps its floor", &Budget{}, 3, 4, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			retries := 0
			for range tt.ops {
				tt.b.Request("h", now)
				for range tt.tries - 1 {
					if tt.b.Retry("h", now) {
						retries++
					}
				}
			}
			if retries != tt.want {
				t.Errorf("retries = %d, want %d", retries, tt.want)
			}
		})
	}
}

func TestBudgetFewFailuresAllRetried(t *testing.T) {
	b := &Budget{}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	denied := 0
	for i := range 1000 {
		b.Request("h", now)
		if i%20 == 0 && !b.Retry("h", now) { // 5% fail
			denied++
		}
		now = now.Add(10 * time.Millisecond)
	}
	if denied != 0 {
		t.Errorf("denied %d retries, want 0", denied)
	}
}

func TestBudgetWindowForgets(t *testing.T) {
	b := &Budget{MinRetries: 1, Ratio: 0.5, Window: 10 * time.Second}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		after time.Duration
		ops   int
		want  bool
	}{
		{0, 2, true},                // 1 + 0.5*2 = 2 allowed
		{0, 0, true},                // second
		{0, 0, false},               // third is over
		{5 * time.Second, 0, false}, // still inside the window
		{6 * time.Second, 0, true},  // 11s later: all forgotten, floor again
	}
	for i, s := range steps {
		now = now.Add(s.after)
		for range s.ops {
			b.Request("h", now)
		}
		if got := b.Retry("h", now); got != s.want {
			t.Errorf("step %d: Retry = %v, want %v", i, got, s.want)
		}
	}
}

func TestBudgetPerHost(t *testing.T) {
	b := &Budget{MinRetries: 1, Ratio: 0.01}
	now := time.Now()
	b.Request("a", now)
	b.Request("b", now)
	if !b.Retry("a", now) || b.Retry("a", now) {
		t.Error("host a: want exactly one retry")
	}
	if !b.Retry("b", now) {
		t.Error("host b: retry refused because of host a")
	}
}

func TestBudgetBoundedHosts(t *testing.T) {
	b := &Budget{MaxHosts: 100, Window: time.Second}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 10000 {
		b.Request(fmt.Sprintf("h%d", i), now)
		now = now.Add(time.Millisecond)
	}
	// Hosts idle for a second are dropped: about 1000 stay (1 per ms).
	if got := b.Hosts(); got > 1200 {
		t.Errorf("hosts tracked = %d, want at most 1200", got)
	}
}

func TestBudgetConcurrent(t *testing.T) {
	b := &Budget{}
	now := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				b.Request("h", now)
				if b.Retry("h", now) {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if want := 10 + 1600; allowed > want {
		t.Errorf("allowed = %d, want at most %d", allowed, want)
	}
}

func BenchmarkBudget(b *testing.B) {
	bg := &Budget{}
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bg.Request("api.example.com", now)
		}
	})
}

// A Window shorter than its ten slots (Window: 5, meant as seconds, is
// 5ns) and a now before 1970 must not panic: Budget runs on every request.
func TestBudgetOddInputs(t *testing.T) {
	tests := []struct {
		name string
		b    *Budget
		now  time.Time
	}{
		{"window 5ns", &Budget{Window: 5}, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"window 1ns", &Budget{Window: 1}, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"before 1970", &Budget{}, time.Date(1969, 12, 31, 23, 59, 58, 0, time.UTC)},
		{"zero time", &Budget{}, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.b.Request("h", tt.now)
			if !tt.b.Retry("h", tt.now) {
				t.Errorf("Retry = false, want true (within MinRetries)")
			}
			tt.b.Request("h", tt.now.Add(time.Second))
			tt.b.Retry("h", tt.now.Add(time.Second))
		})
	}
}

// Huge settings mean "retry freely", not "never": the allowance must not
// overflow int64 into a negative one.
func TestBudgetHugeSettings(t *testing.T) {
	tests := []struct {
		name string
		b    *Budget
	}{
		{"Ratio +Inf", &Budget{Ratio: math.Inf(1), MinRetries: 1}},
		{"Ratio 1e300", &Budget{Ratio: 1e300, MinRetries: 1}},
		{"MinRetries MaxInt", &Budget{MinRetries: math.MaxInt}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i := range 100 {
				tt.b.Request("h", now)
				if !tt.b.Retry("h", now) {
					t.Fatalf("retry %d refused, want every retry allowed", i+1)
				}
			}
		})
	}
}

func TestBudgetAllows(t *testing.T) {
	tests := []struct {
		b            *Budget
		ops, retries int
		want         bool
	}{
		{&Budget{}, 0, 9, true},
		{&Budget{}, 0, 10, false},
		{&Budget{}, 100, 29, true},
		{&Budget{}, 100, 30, false},
		{&Budget{Ratio: 0.5, MinRetries: 1}, 4, 2, true},
		{&Budget{Ratio: 0.5, MinRetries: 1}, 4, 3, false},
		{&Budget{Ratio: math.Inf(1), MinRetries: 1}, 1, 1 << 40, true},
	}
	for i, tt := range tests {
		if got := tt.b.Allows(tt.ops, tt.retries); got != tt.want {
			t.Errorf("step %d: %+v.Allows(%d, %d) = %v, want %v", i, tt.b, tt.ops, tt.retries, got, tt.want)
		}
	}
	var b Budget
	if got := b.Hosts(); got != 0 {
		t.Errorf("Hosts() of an unused budget = %d, want 0", got)
	}
}

// MinRetries "are allowed per Window whatever the traffic": no Ratio, however
// odd (+Inf when the operations have left the window, NaN, negative), may
// take the floor away.
func TestBudgetOddRatioKeepsFloor(t *testing.T) {
	tests := []struct {
		name         string
		b            *Budget
		ops, retries int
		want         bool
	}{
		{"Ratio +Inf, no operation in the window", &Budget{Ratio: math.Inf(1), MinRetries: 1}, 0, 0, true},
		{"Ratio NaN", &Budget{Ratio: math.NaN(), MinRetries: 1}, 100, 0, true},
		{"Ratio -1", &Budget{Ratio: -1, MinRetries: 1}, 100, 0, true},
		{"Ratio -Inf", &Budget{Ratio: math.Inf(-1)}, 5, 9, true},
		{"Ratio -1 over the floor", &Budget{Ratio: -1, MinRetries: 1}, 100, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.Allows(tt.ops, tt.retries); got != tt.want {
				t.Errorf("Allows(%d, %d) = %v, want %v", tt.ops, tt.retries, got, tt.want)
			}
		})
	}
}

// An operation whose first attempt outlasts the Window (a slow host, a
// long AttemptTimeout) has left the window when it asks for its retry: a
// budget with Ratio +Inf ("retry freely") must still allow it.
func TestBudgetInfRatioRetryAfterOperationLeftWindow(t *testing.T) {
	b := &Budget{Ratio: math.Inf(1), MinRetries: 1, Window: 10 * time.Second}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.Request("h", now)
	if got, want := b.Retry("h", now.Add(15*time.Second)), true; got != want {
		t.Errorf("Retry 15s after the operation began = %v, want %v", got, want)
	}
}

// TestBudgetURLIsHostKey: a host counted by URL is the host of the same
// key string (transport.HostKey's "scheme://host"), so that a Budget
// shared by a stack and by its caller keeps one count per host.
func TestBudgetURLIsHostKey(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		url, key string
	}{
		{"https://api.example.com/v1", "https://api.example.com"},
		{"HTTPS://API.example.com:443/v1", "https://api.example.com"},
		{"http://api.example.com:8080/", "http://api.example.com:8080"},
	}
	for _, tt := range tests {
		b := &Budget{MinRetries: 1, Ratio: 1}
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		b.RequestURL(u, now.UnixNano()) // earns one retry beyond the floor of 1
		for i, want := range []bool{true, true, false} {
			var got bool
			if i%2 == 0 {
				got = b.Retry(tt.key, now)
			} else {
				got = b.RetryURL(u, now.UnixNano())
			}
			if got != want {
				t.Errorf("%s: retry %d = %v, want %v", tt.url, i+1, got, want)
			}
		}
		if got := b.Hosts(); got != 1 {
			t.Errorf("%s: Hosts = %d, want 1", tt.url, got)
		}
	}
}

// TestNewBudgetOn: newBudgetOn (hosts.BudgetOn, which transport.New calls): the budget keeps b's settings and its hosts in the
// registry given, or in one of its own.
func TestNewBudgetOn(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	settings := &Budget{MinRetries: 2, Ratio: 1e-9, Window: time.Second}
	reg := hosts.New(hosts.Options{})
	for _, tt := range []struct {
		name      string
		reg       *hosts.Registry
		wantInReg int // hosts it adds to reg
	}{
		{"in the registry given", reg, 1},
		{"nil: a registry of its own", nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := reg.Len()
			b := newBudgetOn(settings, tt.reg)
			var got []bool
			for range 3 {
				got = append(got, b.Retry("h", now))
			}
			if want := []bool{true, true, false}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("retries = %v, want %v (MinRetries 2)", got, want)
			}
			if !b.Retry("h", now.Add(time.Second)) {
				t.Error("retry refused a Window later, want the window forgotten")
			}
			if got := reg.Len() - before; got != tt.wantInReg {
				t.Errorf("hosts in the registry given = %d, want %d", got, tt.wantInReg)
			}
			if got := settings.Hosts(); got != 0 {
				t.Errorf("hosts of the settings' Budget = %d, want 0 (untouched)", got)
			}
		})
	}
}

// fakeStore is a BudgetStore that answers as told and records what it
// was asked.
type fakeStore struct {
	allowed, ok bool
	requests    []string
	retries     []string
	rules       []BudgetRule // of every call, in order
}

func (s *fakeStore) Request(key string, now time.Time, rule BudgetRule) {
	s.requests = append(s.requests, key)
	s.rules = append(s.rules, rule)
}

func (s *fakeStore) Retry(key string, now time.Time, rule BudgetRule) (bool, bool) {
	s.retries = append(s.retries, key)
	s.rules = append(s.rules, rule)
	return s.allowed, s.ok
}

// A Budget with a Store: the Store decides when it can; when it cannot,
// this process's own counts do, and they include the retries the Store
// allowed.
func TestBudgetStore(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := []struct {
		name        string
		allowed, ok bool
		want        []bool // 12 retries in a row, no operation (MinRetries 10)
	}{
		{"store refuses", false, true, repeat(false, 12)},
		{"store allows", true, true, repeat(true, 12)},
		{"store cannot tell: the process's own budget", false, false, append(repeat(true, 10), false, false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &fakeStore{allowed: tt.allowed, ok: tt.ok}
			b := &Budget{Store: s}
			for i, want := range tt.want {
				if got := b.Retry("https://api.example.com", now); got != want {
					t.Errorf("retry %d: got %v, want %v", i, got, want)
				}
			}
		})
	}

	t.Run("retries the store allowed count when it fails", func(t *testing.T) {
		s := &fakeStore{allowed: true, ok: true}
		b := &Budget{Store: s}
		for range 10 {
			b.Retry("https://api.example.com", now)
		}
		s.ok = false
		if b.Retry("https://api.example.com", now) {
			t.Errorf("got a retry from the process's own budget after 10 the store allowed, want none (MinRetries 10)")
		}
	})

	t.Run("host keys and rule", func(t *testing.T) {
		s := &fakeStore{allowed: true, ok: true}
		b := &Budget{Store: s, MinRetries: 3, Window: time.Minute}
		u, _ := url.Parse("https://API.example.com:443/v1/models")
		b.RequestURL(u, now.UnixNano())
		b.RetryURL(u, now.UnixNano())
		b.Request("custom", now)
		b.Retry("custom", now)
		if got, want := s.requests, []string{"https://api.example.com", "custom"}; !slices.Equal(got, want) {
			t.Errorf("requests: got %q, want %q", got, want)
		}
		if got, want := s.retries, []string{"https://api.example.com", "custom"}; !slices.Equal(got, want) {
			t.Errorf("retries: got %q, want %q", got, want)
		}
		want := BudgetRule{Ratio: DefaultBudgetRatio, MinRetries: 3, Window: time.Minute}
		if got := s.rules; len(got) != 4 || slices.ContainsFunc(got, func(r BudgetRule) bool { return r != want }) {
			t.Errorf("rules of the requests and retries: got %+v, want 4 times %+v", got, want)
		}
	})

	t.Run("newBudgetOn keeps the store", func(t *testing.T) {
		s := &fakeStore{allowed: false, ok: true}
		b := newBudgetOn(&Budget{Store: s}, nil)
		if b.Retry("h", now) {
			t.Errorf("got a retry the store refused")
		}
	})
}

func repeat(v bool, n int) []bool { return slices.Repeat([]bool{v}, n) }

// Rule fills in the defaults, and its Allowance is what Allows decides.
func TestBudgetRule(t *testing.T) {
	tests := []struct {
		b    *Budget
		want BudgetRule
	}{
		{&Budget{}, BudgetRule{Ratio: 0.2, MinRetries: 10, Window: 10 * time.Second}},
		{&Budget{Ratio: -1, MinRetries: 3, Window: -1}, BudgetRule{Ratio: 0, MinRetries: 3, Window: 10 * time.Second}},
		{&Budget{Ratio: math.NaN()}, BudgetRule{Ratio: 0, MinRetries: 10, Window: 10 * time.Second}},
	}
	for _, tt := range tests {
		if got := tt.b.Rule(); got != tt.want {
			t.Errorf("Budget{Ratio: %v, MinRetries: %d, Window: %v}.Rule(): got %+v, want %+v", tt.b.Ratio, tt.b.MinRetries, tt.b.Window, got, tt.want)
		}
		for ops := range 50 {
			for retries := range 30 {
				if got, want := tt.b.Allows(ops, retries), float64(retries) < tt.b.Rule().Allowance(ops); got != want {
					t.Fatalf("Allows(%d, %d) = %v, Allowance says %v", ops, retries, got, want)
				}
			}
		}
	}
}
