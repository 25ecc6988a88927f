package fleet

// DecodeResponseForTest exposes decodeResponse to the fuzz test.
var DecodeResponseForTest = decodeResponse

// Refreshes returns how many refreshes f has completed.
func (f *Fleet) Refreshes() int64 { return f.refreshes.Load() }
