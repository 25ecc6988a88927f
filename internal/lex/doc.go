// Package lex lexes HTTP field values for the packages of sturdy: the
// optional whitespace around a value ([TrimOWS]), tokens ([IsToken]), the
// one HTTP-date parser ([ParseHTTPDate], and [ServerNow] for a response's
// Date), and Structured Field Lists and Items of RFC 9651 ([List],
// [ParseItem]).
//
// Every function here is pure and allocation-free unless its doc says
// otherwise, so that header parsing stays off the allocation profile of a
// request. Users do not see this package; policy, ratelimit and
// idempotency share it so that each rule of the HTTP grammar is written
// once.
package lex
