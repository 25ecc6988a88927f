package hosts

import (
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type counter struct {
	key Key
	n   atomic.Int64
}

type pause struct{ until time.Time }

func host(i int) Key { return MakeKey("https", "h"+strconv.Itoa(i)+".example") }

func TestSlotsOfOneHostSitSideBySide(t *testing.T) {
	r := New(Options{})
	counters := NewSlot(r, func(k Key) *counter { return &counter{key: k} }, nil)
	pauses := NewSlot(r, func(Key) *pause { return &pause{} }, nil)
	k := MakeKey("https", "api.example.com:443")
	c := counters.Get(k)
	c.n.Add(1)
	p := pauses.Get(MakeKey("HTTPS", "API.example.com"))
	if got := counters.Get(k); got != c {
		t.Errorf("second Get = %p, want the first state %p", got, c)
	}
	if got := c.key; got != k {
		t.Errorf("state made for %v, want %v", got, k)
	}
	if got := pauses.Peek(k); got != p {
		t.Errorf("Peek of the other slot = %p, want %p", got, p)
	}
	if got := r.Len(); got != 1 {
		t.Errorf("Len() = %d, want 1 (one host, two slots)", got)
	}
	if got := counters.Peek(MakeKey("https", "other.example")); got != nil {
		t.Errorf("Peek of an unknown host = %p, want nil", got)
	}
	if got := r.Len(); got != 1 {
		t.Errorf("Len() after Peek = %d, want 1 (Peek adds nothing)", got)
	}
	var seen []Key
	counters.Range(func(k Key, c *counter) bool {
		if c.n.Load() != 1 {
			t.Errorf("Range: state of %v has n = %d, want 1", k, c.n.Load())
		}
		seen = append(seen, k)
		return true
	})
	if len(seen) != 1 || seen[0] != k {
		t.Errorf("Range saw %v, want [%v]", seen, k)
	}
}

func TestGetOfAKnownHostAllocatesNothing(t *testing.T) {
	r := New(Options{})
	s := NewSlot(r, func(k Key) *counter { return &counter{key: k} }, nil)
	k := MakeKey("https", "api.example.com")
	s.Get(k)
	if n := testing.AllocsPerRun(100, func() { s.Get(k).n.Add(1) }); n != 0 {
		t.Errorf("Get allocates %v times, want 0", n)
	}
}

func TestNewSlotRefusesANinthSlot(t *testing.T) {
	r := New(Options{})
	for i := range maxSlots {
		if s := NewSlot(r, func(Key) *counter { return new(counter) }, nil); s == nil {
			t.Fatalf("slot %d: NewSlot = nil, want a slot", i)
		}
	}
	if s := NewSlot(r, func(Key) *counter { return new(counter) }, nil); s != nil {
		t.Errorf("slot %d: NewSlot = %v, want nil", maxSlots, s)
	}
}

// TestIdleHostsAreForgottenUnlessLive runs the eviction rule on a fake
// clock: unused for a sweep interval, a host goes; a live one stays
// until its state has passed, however long unused.
func TestIdleHostsAreForgottenUnlessLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(Options{IdleTimeout: time.Minute})
		pauses := NewSlot(r, func(Key) *pause { return &pause{} }, func(p *pause, now time.Time) bool { return now.Before(p.until) })
		idle, busy, paused := host(1), host(2), host(3)
		pauses.Get(idle)
		pauses.Get(busy)
		pauses.Get(paused).until = time.Now().Add(5 * time.Minute)

		steps := []struct {
			wait        time.Duration
			use         []Key
			idle, pause bool // still remembered after the step
		}{
			{wait: 61 * time.Second, use: []Key{busy}, idle: true, pause: true}, // first sweep: marks all unused
			{wait: 61 * time.Second, use: []Key{busy}, idle: false, pause: true},
			{wait: 61 * time.Second, use: []Key{busy}, idle: false, pause: true},
			{wait: 3 * time.Minute, use: []Key{busy}, idle: false, pause: false}, // the pause has passed
		}
		for i, st := range steps {
			time.Sleep(st.wait)
			for _, k := range st.use {
				pauses.Get(k)
			}
			pauses.Get(host(100 + i)) // an add runs the sweep
			if got := pauses.Peek(idle) != nil; got != st.idle {
				t.Errorf("step %d: idle host remembered = %v, want %v", i, got, st.idle)
			}
			if got := pauses.Peek(paused) != nil; got != st.pause {
				t.Errorf("step %d: paused host remembered = %v, want %v", i, got, st.pause)
			}
			if pauses.Peek(busy) == nil {
				t.Errorf("step %d: busy host forgotten, want it kept", i)
			}
		}
	})
}

func TestAFullRegistryMakesRoomOrRefuses(t *testing.T) {
	r := New(Options{MaxHosts: 16})
	live := true
	s := NewSlot(r, func(Key) *pause { return &pause{} }, func(*pause, time.Time) bool { return live })
	for i := range 16 {
		if s.Get(host(i)) == nil {
			t.Fatalf("host %d: Get = nil below MaxHosts", i)
		}
	}
	if got := s.Get(host(16)); got != nil {
		t.Errorf("Get with every host live = %p, want nil (nothing may be dropped)", got)
	}
	if got := r.Len(); got != 16 {
		t.Errorf("Len() = %d, want 16", got)
	}
	for i := range 16 { // used since the last sweep: kept by its first pass
		s.Get(host(i))
	}
	live = false
	if got := s.Get(host(16)); got == nil {
		t.Fatalf("Get with no host live = nil, want room made")
	}
	if got, want := r.Len(), 16-2+1; got != want { // an eighth of 16 freed, then one added
		t.Errorf("Len() = %d, want %d", got, want)
	}
}

func TestConcurrentGetMakesOneStatePerHost(t *testing.T) {
	r := New(Options{MaxHosts: 64})
	var made atomic.Int64
	s := NewSlot(r, func(k Key) *counter { made.Add(1); return &counter{key: k} }, nil)
	var wg sync.WaitGroup
	got := make([][]*counter, 8)
	for g := range got {
		wg.Go(func() {
			for i := range 32 {
				got[g] = append(got[g], s.Get(host(i)))
			}
		})
	}
	wg.Wait()
	for g := range got {
		for i, c := range got[g] {
			if c != got[0][i] {
				t.Fatalf("goroutine %d, host %d: state %p, want %p (one state per host)", g, i, c, got[0][i])
			}
		}
	}
	if n := r.Len(); n != 32 {
		t.Errorf("Len() = %d, want 32", n)
	}
}

func BenchmarkGet(b *testing.B) {
	r := New(Options{})
	s := NewSlot(r, func(k Key) *counter { return &counter{key: k} }, nil)
	k := MakeKey("https", "api.example.com")
	s.Get(k)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Get(k)
		}
	})
}

func BenchmarkGetSerial(b *testing.B) {
	r := New(Options{})
	s := NewSlot(r, func(k Key) *counter { return &counter{key: k} }, nil)
	k := MakeKey("https", "api.example.com")
	s.Get(k)
	b.ReportAllocs()
	for b.Loop() {
		s.Get(k)
	}
}

// Lookups by URL find the host that KeyOf names, whichever spelling of
// it comes first, through the recent host or the table.
func TestLookupsByURLMatchKeyOf(t *testing.T) {
	r := New(Options{})
	s := NewSlot(r, func(k Key) *counter { return &counter{key: k} }, nil)
	mustParse := func(raw string) *url.URL {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	urls := []string{
		"https://API.example.com:443/v1",
		"https://api.example.com/v1",
		"https://other.example/x",
		"HTTPS://api.example.com:/v2",
		"http://api.example.com/v1",
		"https://api.example.com:8443/v1",
		"https://api.example.com/v3",
	}
	for round := range 2 {
		for _, raw := range urls {
			u := mustParse(raw)
			want := s.Get(KeyOf(u))
			if got := s.GetURL(u); got != want {
				t.Errorf("round %d: GetURL(%s) = %v, want Get(KeyOf) = %v", round, raw, got.key, want.key)
			}
			if got := s.PeekURL(u); got != want {
				t.Errorf("round %d: PeekURL(%s) = %v, want %v", round, raw, got.key, want.key)
			}
			if got := r.LookupURL(u); got == nil || got.Key() != KeyOf(u) {
				t.Errorf("round %d: LookupURL(%s) = %v, want the entry of %v", round, raw, got, KeyOf(u))
			}
		}
	}
	if got, want := r.Len(), 4; got != want {
		t.Errorf("Len() = %d, want %d", got, want)
	}
	if got := s.PeekURL(mustParse("https://unknown.example/")); got != nil {
		t.Errorf("PeekURL of an unknown host = %v, want nil", got.key)
	}
	if got := s.GetURL(nil); got != s.Get(Key{}) {
		t.Errorf("GetURL(nil) is not Get(Key{})")
	}
}

// A host dropped by a sweep is not found through the recent host: the
// next lookup makes a new entry, as one through the table does.
func TestRecentHostIsForgottenWhenDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(Options{IdleTimeout: time.Minute})
		s := NewSlot(r, func(k Key) *counter { return &counter{key: k} }, nil)
		u, _ := url.Parse("https://api.example.com/v1")
		first := s.GetURL(u)
		time.Sleep(2 * time.Minute)
		s.Get(host(1)) // sweeps: api.example.com was used before the last sweep (none): marked unused
		time.Sleep(2 * time.Minute)
		s.Get(host(2)) // sweeps again: api.example.com unused since, dropped
		if got := s.PeekURL(u); got != nil {
			t.Fatalf("PeekURL after the host was dropped = %p, want nil", got)
		}
		if got := s.GetURL(u); got == first {
			t.Errorf("GetURL after the host was dropped returned the dropped state")
		}
		if got, want := r.Len(), 3; got != want {
			t.Errorf("Len() = %d, want %d", got, want)
		}
	})
}

func TestGetURLOfTheRecentHostAllocatesNothing(t *testing.T) {
	r := New(Options{})
	s := NewSlot(r, func(k Key) *counter { return &counter{key: k} }, nil)
	a, _ := url.Parse("https://api.example.com/v1")
	b, _ := url.Parse("https://other.example.com/v1")
	s.GetURL(a)
	s.GetURL(b)
	if n := testing.AllocsPerRun(100, func() { s.GetURL(a).n.Add(1); s.GetURL(b).n.Add(1) }); n != 0 {
		t.Errorf("GetURL allocates %v times, want 0", n)
	}
}

// A new host's entry is two objects, its entry and its name (which holds
// its key's strings and, when a URL spells it alike, that spelling too),
// beside the copy of its shard's table: each object is one more that the
// collector marks while the host is remembered.
func TestANewHostIsItsEntryAndItsName(t *testing.T) {
	r := New(Options{})
	const n = 50
	urls := make([]*url.URL, n+1)
	for i := range urls {
		urls[i], _ = url.Parse("https://h" + strconv.Itoa(i) + ".example.com/v1")
	}
	i := 0
	got := testing.AllocsPerRun(n, func() {
		r.HostURL(urls[i])
		i++
	})
	// The shard's table is copied on write: its struct, its slots and the
	// list of the hosts it keeps.
	const table = 3
	if want := float64(2 + table); got > want {
		t.Errorf("adding a host allocates %v times, want at most %v", got, want)
	}
	for _, u := range urls {
		h := r.LookupURL(u)
		if h == nil || h.Name() != "https://"+u.Host || h.Key() != KeyOf(u) {
			t.Fatalf("entry of %s: %+v", u, h)
		}
	}
}
