package retry

// ErrNilResponse is the error of an attempt, or a hedge copy, whose
// RoundTripper beneath returned neither a response nor an error.
var ErrNilResponse error = nilResponseError{}

// nilResponseError is the error of an attempt whose RoundTripper beneath
// returned neither a response nor an error: a broken RoundTripper, which
// breaks the same way on every attempt. It is not retried.
type nilResponseError struct{}

func (nilResponseError) Error() string {
	return "transport: RoundTripper returned a nil *Response with a nil error"
}

// Retriable returns false: the policy package's DefaultClassifier obeys
// it, so no retry is made that would meet the same broken RoundTripper.
func (nilResponseError) Retriable() bool { return false }
