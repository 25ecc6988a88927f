package fleet

// DecodeResponseForTest exposes decodeResponse to the fuzz test.
var DecodeResponseForTest = decodeResponse

// Refreshes returns how many refreshes f has completed.
func (f *Fleet) Refreshes() int64 { return f.refreshes.Load() }

// Downs returns how many times f has taken Redis as unreachable.
func (f *Fleet) Downs() int64 { return f.downs.Load() }
