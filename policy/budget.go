package policy

// Budget: PLACEHOLDER, implemented with transport.New's work.
type Budget struct{}
