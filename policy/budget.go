package policy

import "time"

// Budget: PLACEHOLDER, implemented with transport.New's work.
type Budget struct{}

func (b *Budget) Request(key string, now time.Time)    {}
func (b *Budget) Retry(key string, now time.Time) bool { return true }
