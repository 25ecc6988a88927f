package policy

import "net/http"

// SafeToResend reports whether req may be sent more than once whatever
// becomes of it. That is so when someone vouched that a second copy has no
// second side effect:
//
//   - its method is idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE:
//     RFC 9110 §9.2.2);
//   - it carries a key in keyHeader ("Idempotency-Key" when empty), set by
//     the caller, its SDK, [idempotency.WithKey], or
//     transport.IdempotencyKey;
//   - or it has an Idempotency-Key or X-Idempotency-Key header at all,
//     even an empty or nil one, since net/http itself replays such a request.
//
// Any other request, such as a POST nobody vouched for, is sent again only
// when the outcome proves that the server did not act on it. See
// [Decision].DidNotAct. Hedged attempts follow the same rule.
//
// [idempotency.WithKey]: https://pkg.go.dev/github.com/sturdyhttp/sturdy/idempotency#WithKey
func SafeToResend(req *http.Request, keyHeader string) bool {
	if idempotentMethod(req.Method) || HasKey(req, keyHeader) {
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

// HasKey reports whether req carries a non-empty idempotency key in
// keyHeader ("Idempotency-Key" when empty).
func HasKey(req *http.Request, keyHeader string) bool {
	if keyHeader == "" || keyHeader == "Idempotency-Key" {
		// The common name, canonical already: a map lookup, without
		// Header.Get's canonicalization of the name on every request.
		v := req.Header["Idempotency-Key"]
		return len(v) > 0 && v[0] != ""
	}
	return req.Header.Get(keyHeader) != ""
}

// idempotentMethod reports whether method m is idempotent by RFC 9110
// §9.2.2; the empty method means GET.
func idempotentMethod(m string) bool {
	switch m {
	case "", "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}
