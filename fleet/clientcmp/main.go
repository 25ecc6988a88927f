// Command clientcmp measures the two Redis clients considered for the
// fleet module, go-redis v9 and rueidis, on the fleet's own workload: the
// quota lease script (EVALSHA), the probe claim (SET NX PX) and the
// refresh pipeline (HMGET + HGETALL for 8 hosts), at 1 and 64 concurrent
// callers, against a redis-server it starts on a unix socket. It prints
// calls per second, latency p50/p99, and writes to the socket per call
// (round trips: auto-pipelining sends many calls in one write). Then it
// pauses the server (SIGSTOP) and kills it, and prints how long a call
// with a 50ms deadline takes to fail.
//
//	cd fleet/clientcmp && go run .
package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/fleet/internal/luascript"
	"github.com/sturdyhttp/sturdy/fleet/internal/redisproc"
)

// lease is the fleet's quota lease script.
const lease = luascript.Lease

var writes atomic.Int64

type countConn struct{ net.Conn }

func (c countConn) Write(b []byte) (int, error) { writes.Add(1); return c.Conn.Write(b) }

func dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "unix", addr)
	if err != nil {
		return nil, err
	}
	return countConn{c}, nil
}

// client is one Redis client doing the three operations.
type client struct {
	name    string
	lease   func(ctx context.Context, host int) error
	claim   func(ctx context.Context, host int) error
	refresh func(ctx context.Context) error
}

func goRedis(addr string) (client, func()) {
	c := redis.NewClient(&redis.Options{
		Network: "unix", Addr: addr, PoolSize: 64,
		ContextTimeoutEnabled: true, // without it, a 50ms deadline waits 5s on a stopped server
		Dialer:                func(ctx context.Context, _, a string) (net.Conn, error) { return dial(ctx, a) },
	})
	s := redis.NewScript(lease)
	return client{
		name: "go-redis v9.23.0",
		lease: func(ctx context.Context, h int) error {
			return s.Run(ctx, c, []string{fmt.Sprintf("b:rate:{h%d}", h), fmt.Sprintf("b:q:{h%d}", h)}, "1", "1000000", "1", "1e15", "").Err()
		},
		claim: func(ctx context.Context, h int) error {
			err := c.SetNX(ctx, fmt.Sprintf("b:brk:{h%d}:probe", h), "1", time.Millisecond).Err()
			if err == redis.Nil {
				err = nil
			}
			return err
		},
		refresh: func(ctx context.Context) error {
			p := c.Pipeline()
			for h := range 8 {
				p.HMGet(ctx, fmt.Sprintf("b:brk:{h%d}", h), "s", "u", "v")
				p.HGetAll(ctx, fmt.Sprintf("b:q:{h%d}", h))
			}
			_, err := p.Exec(ctx)
			return err
		},
	}, func() { c.Close() }
}

func rueidisClient(addr string) (client, func()) {
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{addr}, DisableCache: true,
		DialCtxFn: func(ctx context.Context, a string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return dial(ctx, a)
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s := rueidis.NewLuaScript(lease)
	return client{
		name: "rueidis v1.0.79",
		lease: func(ctx context.Context, h int) error {
			return s.Exec(ctx, c, []string{fmt.Sprintf("r:rate:{h%d}", h), fmt.Sprintf("r:q:{h%d}", h)}, []string{"1", "1000000", "1", "1e15", ""}).Error()
		},
		claim: func(ctx context.Context, h int) error {
			err := c.Do(ctx, c.B().Set().Key(fmt.Sprintf("r:brk:{h%d}:probe", h)).Value("1").Nx().PxMilliseconds(1).Build()).Error()
			if rueidis.IsRedisNil(err) {
				err = nil
			}
			return err
		},
		refresh: func(ctx context.Context) error {
			cmds := make(rueidis.Commands, 0, 16)
			for h := range 8 {
				cmds = append(cmds, c.B().Hmget().Key(fmt.Sprintf("r:brk:{h%d}", h)).Field("s", "u", "v").Build())
				cmds = append(cmds, c.B().Hgetall().Key(fmt.Sprintf("r:q:{h%d}", h)).Build())
			}
			for _, r := range c.DoMulti(ctx, cmds...) {
				if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
					return err
				}
			}
			return nil
		},
	}, c.Close
}

// measure runs op total times from conc goroutines and prints a row.
func measure(cl, opName string, conc, total int, op func(ctx context.Context, i int) error) {
	lat := make([]time.Duration, total)
	var next, errs atomic.Int64
	writes.Store(0)
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				t := time.Now()
				if op(ctx, i) != nil {
					errs.Add(1)
				}
				lat[i] = time.Since(t)
				cancel()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	fmt.Printf("| %s | %s | %d | %.0f | %v | %v | %.2f | %d |\n", cl, opName, conc, float64(total)/elapsed.Seconds(),
		lat[total/2].Round(time.Microsecond), lat[total*99/100].Round(time.Microsecond),
		float64(writes.Load())/float64(total), errs.Load())
}

func main() {
	srv, err := redisproc.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer srv.Close()
	gr, closeGR := goRedis(srv.Addr)
	defer closeGR()
	ru, closeRU := rueidisClient(srv.Addr)
	defer closeRU()
	clients := []client{gr, ru}

	fmt.Println("| client | operation | callers | calls/s | p50 | p99 | writes/call | errors |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, c := range clients { // warm up: connections, script cache
		for i := range 2000 {
			c.lease(context.Background(), i%8)
			c.claim(context.Background(), i%8)
		}
	}
	for _, conc := range []int{1, 64} {
		for _, c := range clients {
			measure(c.name, "quota lease (EVALSHA)", conc, 20000, func(ctx context.Context, i int) error { return c.lease(ctx, i%8) })
			measure(c.name, "probe claim (SET NX PX)", conc, 20000, func(ctx context.Context, i int) error { return c.claim(ctx, i%8) })
			measure(c.name, "refresh (16-command pipeline)", conc, 5000, func(ctx context.Context, _ int) error { return c.refresh(ctx) })
		}
	}

	fmt.Println()
	fmt.Println("| client | Redis | lease with a 50ms deadline fails after |")
	fmt.Println("| --- | --- | --- |")
	fail := func(state string) {
		for _, c := range clients {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			start := time.Now()
			err := c.lease(ctx, 0)
			cancel()
			fmt.Printf("| %s | %s | %v (%v) |\n", c.name, state, time.Since(start).Round(time.Millisecond), err)
		}
	}
	srv.Pause()
	fail("paused (SIGSTOP)")
	srv.Kill()
	fail("killed")
}
