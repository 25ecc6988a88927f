package policy

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/internal/window"
)

// Defaults of [Latencies], used where a field is zero.
const (
	DefaultLatencyQuantile   = 0.95
	DefaultLatencyMinSamples = 20
	DefaultLatencyWindow     = 1000
	DefaultLatencyMaxHosts   = 1024
)

// Latency buckets are log-linear over microseconds: values below
// 2^subBits µs have a bucket each; above, every power of two is cut into
// 2^subBits buckets, so a bucket is at most 1/2^subBits (25%) wide. The
// last bucket holds everything from 2^(maxExp+1) µs, about 134 s, up.
const (
	subBits       = 2
	subBuckets    = 1 << subBits
	maxExp        = 26 // the buckets of [2^26, 2^27) µs are the last bounded ones: 67 s to 134 s
	latencyBucket = (maxExp-subBits+2)*subBuckets + 1
	// recomputeEvery is how many samples pass between two computations
	// of a host's quantile: reading the quantile is one atomic load.
	recomputeEvery = 16
)

// Latencies keeps, per host, a small histogram of recent latencies and
// answers with a quantile of them (the 95th percentile by default): the
// adaptive delay of a hedged request, which is sent when its first copy
// has taken longer than most requests to that host. For a stream that
// package transport hands back at its first content event, the latency
// learned is its time to first event, which is what its hedges are timed to.
//
// Each host's sketch is a histogram of 105 log-linear buckets (25% wide,
// 1 µs to 134 s, and one above). It is kept in the module's one sliding
// window, whose clock here is the count of samples. The window has two
// halves of Window samples; the older is dropped when the newer is full.
// So the quantile covers the last Window to 2×Window samples. Recording
// a sample is two atomic adds and a load; reading the quantile is one
// load (it is recomputed every 16 samples). There is no lock on either
// path. A quantile is the upper edge of its bucket, so it errs long: a
// hedge delay never undercuts the true quantile by more than rounding.
// A quantile above 134 s, in the last bucket, which has no upper edge,
// is not reported: Delay says that nothing is known, and the request is
// sent once (a copy sent after minutes would seldom win).
//
// The zero value is ready to use with the documented defaults; a
// Latencies must not be copied after first use. It is safe for
// concurrent use by multiple goroutines.
type Latencies struct {
	// Quantile is the quantile reported, in (0, 1). Zero means
	// [DefaultLatencyQuantile] (0.95).
	Quantile float64
	// MinSamples is how many samples a host needs before a quantile is
	// reported. Zero means [DefaultLatencyMinSamples] (20).
	MinSamples int
	// Window is how many samples each half of a host's sketch holds.
	// Zero means [DefaultLatencyWindow] (1000).
	Window int
	// MaxHosts bounds how many hosts are tracked, in the module's one
	// per-host registry: beyond it, the hosts unused the longest are
	// forgotten (they relearn within MinSamples requests). Zero means
	// [DefaultLatencyMaxHosts] (1024).
	MaxHosts int

	once sync.Once
	slot *hosts.Slot[sketch]
}

type sketch struct {
	samples  atomic.Int64     // samples recorded: the window's clock
	hist     window.Histogram // two halves, Window samples wide
	quantile atomic.Int64     // nanoseconds; 0 until MinSamples are known
}

func (l *Latencies) init() {
	l.once.Do(func() {
		max := l.MaxHosts
		if max <= 0 {
			max = DefaultLatencyMaxHosts
		}
		reg := hosts.New(hosts.Options{MaxHosts: max})
		width := int64(l.window())
		l.slot = hosts.NewSlot(reg, func(hosts.Key) *sketch {
			s := new(sketch)
			s.hist.Init(latencyBucket, width, 2)
			return s
		}, nil)
	})
}

// Observe records that a request to host key took d.
func (l *Latencies) Observe(key string, d time.Duration) {
	l.init()
	s := l.slot.Get(hosts.Custom(key))
	if s == nil { // the registry is full of hosts it cannot drop
		return
	}
	seq := s.samples.Add(1) - 1 // this sample's number, from 0
	s.hist.Add(seq, bucketOf(d))
	// The half that seq fell in holds n samples; when it is full, the
	// window from the next sample on holds it alone.
	half := int64(l.window())
	n := seq%half + 1
	if n%recomputeEvery == 0 || n == half || n == int64(l.minSamples()) {
		s.quantile.Store(int64(s.compute(seq+1, l.quantile(), l.minSamples())))
	}
}

// Delay returns host key's quantile of recent latencies, and false when
// fewer than MinSamples latencies of it are known.
func (l *Latencies) Delay(key string) (time.Duration, bool) {
	l.init()
	s := l.slot.Get(hosts.Custom(key)) // a use: the host is kept
	if s == nil {
		return 0, false
	}
	q := s.quantile.Load()
	return time.Duration(q), q > 0
}

// Hosts reports how many hosts are tracked.
func (l *Latencies) Hosts() int {
	l.init()
	return l.slot.Registry().Len()
}

func (l *Latencies) window() int {
	if l.Window <= 0 {
		return DefaultLatencyWindow
	}
	return l.Window
}

func (l *Latencies) quantile() float64 {
	if l.Quantile <= 0 || l.Quantile >= 1 || math.IsNaN(l.Quantile) {
		return DefaultLatencyQuantile
	}
	return l.Quantile
}

func (l *Latencies) minSamples() int {
	if l.MinSamples <= 0 {
		return DefaultLatencyMinSamples
	}
	return l.MinSamples
}

// compute returns the q-quantile of the window that ends at sample now,
// as the upper edge of its bucket, or 0 with fewer than min samples.
func (s *sketch) compute(now int64, q float64, min int) time.Duration {
	var counts [latencyBucket]uint64
	total := int64(s.hist.Sum(now, counts[:]))
	if total < int64(min) || total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for b, c := range counts[:latencyBucket-1] {
		seen += int64(c)
		if seen >= rank {
			return bucketUpper(b)
		}
	}
	return 0 // in the last bucket, which has no upper edge
}

// bucketOf returns the bucket of a latency.
func bucketOf(d time.Duration) int {
	us := d.Microseconds()
	if us < subBuckets {
		return int(max(us, 0))
	}
	e := bits.Len64(uint64(us)) - 1 // us is in [2^e, 2^(e+1))
	if e > maxExp {
		return latencyBucket - 1
	}
	sub := int(uint64(us)>>(e-subBits)) & (subBuckets - 1)
	return (e-subBits+1)*subBuckets + sub
}

// bucketUpper returns the smallest latency above bucket b.
func bucketUpper(b int) time.Duration {
	if b < subBuckets {
		return time.Duration(b+1) * time.Microsecond
	}
	if b >= latencyBucket-1 {
		return time.Duration(1<<(maxExp+1)) * time.Microsecond
	}
	e := b/subBuckets + subBits - 1
	sub := b % subBuckets
	us := (int64(subBuckets+sub) + 1) << (e - subBits)
	return time.Duration(us) * time.Microsecond
}
