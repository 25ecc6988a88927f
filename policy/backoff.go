package policy

import "time"

// Backoff returns how long to wait before retry number attempt (1 for the
// first retry). prev is the wait chosen before the previous retry (0 before
// the first), for curves that depend on it.
type Backoff func(attempt int, prev time.Duration) time.Duration

// PLACEHOLDER: replaced by the policy parsers work.
func Exponential(base, max time.Duration) Backoff        { return nil }
func FullJitter(base, max time.Duration) Backoff         { return nil }
func EqualJitter(base, max time.Duration) Backoff        { return nil }
func DecorrelatedJitter(base, max time.Duration) Backoff { return nil }
func AdditiveJitter(base, max time.Duration) Backoff     { return nil }
