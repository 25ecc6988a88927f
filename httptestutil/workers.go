package httptestutil

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Workers is a server of finite capacity, as most servers are: a fixed
// number of workers, each serving one request at a time for Service,
// behind a first-in first-out queue of any length. Like most servers, it
// does not look at whether a caller is still there: a request whose
// caller gave up while it queued still takes a worker for Service when
// its turn comes. Its capacity is Workers ÷ Service requests a second;
// past it the queue grows, every caller waits longer, and the work done
// for callers who left is wasted. That is congestion collapse.
//
// Each request is answered 200 with the body "ok\n". Make it with
// [NewWorkers]; call Close when done, so that no worker is left (a
// synctest bubble requires it).
type Workers struct {
	queue   chan *workerJob
	wg      sync.WaitGroup
	closing chan struct{}
	once    sync.Once
	service atomic.Int64 // nanoseconds

	served    atomic.Int64 // requests a worker served, the callers there or not
	abandoned atomic.Int64 // of these, whose caller had left by the end
	inQueue   atomic.Int64
}

type workerJob struct {
	done chan struct{}
	gone atomic.Bool // the caller left
}

// NewWorkers starts a server of n workers (at least 1), each serving a
// request for service.
func NewWorkers(n int, service time.Duration) *Workers {
	w := &Workers{queue: make(chan *workerJob, 1<<17), closing: make(chan struct{})}
	w.service.Store(int64(service))
	for range max(n, 1) {
		w.wg.Go(w.work)
	}
	return w
}

func (w *Workers) work() {
	for {
		select {
		case j := <-w.queue:
			w.inQueue.Add(-1)
			time.Sleep(time.Duration(w.service.Load()))
			w.served.Add(1)
			if j.gone.Load() {
				w.abandoned.Add(1)
			}
			close(j.done)
		case <-w.closing:
			return
		}
	}
}

// ServeHTTP queues the request for a worker and answers when it has been
// served; a caller that leaves first gets nothing, but its request is
// served all the same. When the queue is full (131,072 requests), it
// answers 503.
func (w *Workers) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	j := &workerJob{done: make(chan struct{})}
	select {
	case w.queue <- j:
		w.inQueue.Add(1)
	default:
		http.Error(rw, "queue full", http.StatusServiceUnavailable)
		return
	}
	select {
	case <-j.done:
		rw.Write([]byte("ok\n"))
	case <-r.Context().Done():
		j.gone.Store(true)
	case <-w.closing:
	}
}

// SetService changes the time a worker takes for each request from now
// on: a server that slows down (a cold cache, a noisy neighbour).
func (w *Workers) SetService(d time.Duration) { w.service.Store(int64(d)) }

// Served returns how many requests the workers served, and how many of
// them for callers that had left.
func (w *Workers) Served() (served, abandoned int64) {
	return w.served.Load(), w.abandoned.Load()
}

// Queued returns how many requests wait for a worker.
func (w *Workers) Queued() int64 { return w.inQueue.Load() }

// Close stops the workers; requests still queued are not served.
func (w *Workers) Close() {
	w.once.Do(func() { close(w.closing) })
	w.wg.Wait()
}
