package policy

import (
	"net/http"
	"time"
)

// PLACEHOLDER: replaced by the policy parsers work.
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) { return 0, false }
