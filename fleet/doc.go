// Package fleet shares sturdy's state between the processes of a fleet
// through Redis (or Valkey): the breakers' "open until" states and probes
// ([Fleet.Breakers]), so that when one process sees a host down the others
// fail fast too; a rate the whole fleet may send to a host at, and the
// pauses servers ask for ([Fleet.Quotas]), so that a 429 seen by one
// process holds back all of them; one retry budget per host for every
// process ([Fleet.Budgets]), so that a fleet adds no more retries to a
// failing host than one process's budget allows; and the idempotency keys
// of [idempotency.Handler] ([IdempotencyStore]), so that a retry landing
// on another server is still deduplicated, across a failover too
// ([IdempotencyOptions].Replicas).
//
// It is a module of its own, github.com/sturdyhttp/sturdy/fleet, so that
// the core module does not depend on a Redis client. It uses
// github.com/redis/rueidis: callers pass a rueidis.Client they made, and
// close it themselves.
//
// # Redis calls, and Redis down
//
// Each operation is one Lua script or command, so one round trip, and runs
// unchanged on a Redis Cluster: every key carries a hash tag ({...}), the
// host for the shared state, and no script touches two tags (there, the
// [IdempotencyStore] also reads the cluster's topology, at most once a
// second, to know which shards have a replica to wait for). Nothing waits
// on Redis longer than [Options.Timeout] (50ms by default), and most
// requests do not wait on it at all:
//
//   - the breakers' and quotas' fleet view is read in the background by
//     one goroutine per [Fleet], every RefreshInterval (100ms), in one
//     pipeline; changes are written in the background too;
//   - a request waits on Redis only to lease quota places or retries (in
//     batches: a busy process leases once per many requests) and to claim
//     a half-open breaker's probe.
//
// When Redis is slow or down, the call that finds out waits at most
// Timeout; from then until a refresh gets through, requests go on under
// each process's own state without asking Redis, and the changes made
// meanwhile are written when it is back. The fleet view resumes with the
// first refresh that gets through. A key that holds something fleet did not
// write never causes a panic: the call fails with an error that names the
// key (one matching [ErrMalformed] for a value fleet cannot decode,
// Redis's own WRONGTYPE error for a key of another type), and the request
// goes on as if Redis were down. The idempotency
// store waits for Redis up to its Timeout and, without an answer, the
// Handler refuses the keyed request (503) rather than run it unlocked.
//
// # Keys
//
// Every key starts with a prefix, "sturdy" by default:
//
//	<prefix>:brk:{<host>}         hash    breaker state: s ("o" open, "c" closed), u (open
//	                                      until, Unix ms), v (version: Redis's clock in µs,
//	                                      always growing); expires 10 min after u
//	<prefix>:brk:{<host>}:probe   string  the half-open probe claim (SET NX PX); deleted
//	                                      when a closing is published, held until the open
//	                                      period ends when an opening is
//	<prefix>:rate:{<host>}        string  the fleet-wide rate's GCRA state: the theoretical
//	                                      arrival time (Unix ms, Redis's clock); expires when
//	                                      the bucket is full again
//	<prefix>:q:{<host>}           hash    pauses servers asked for: p:<resource> = end (Unix
//	                                      ms), "p:" for the whole host; expires after the last
//	<prefix>:bud:{<host>}         hash    retry budget: o:<tick> operations and r:<tick>
//	                                      retries per tenth of the Window (tick: Redis's
//	                                      time in ms / the tenth); expires after the Window
//	<prefix>:idem:{<key>}         hash    idempotency record: fp (request fingerprint),
//	                                      tok (lock token, while in flight), resp (the stored
//	                                      response, once completed), ctok (the token that
//	                                      completed it); expires after the lock
//	                                      TTL, then after the response TTL
//	<prefix>:idem:{<key>}:gone:<token>
//	                              string  a Begin that got no answer: the lock it may yet
//	                                      take is not taken; expires after the lock TTL
//
// <host> is the host's key as the breakers and the Tracker name it,
// "https://api.example.com" by default; <resource> is the quota's resource
// ("" for the whole host).
//
// A guide with examples is docs/fleet.md in the repository.
package fleet
