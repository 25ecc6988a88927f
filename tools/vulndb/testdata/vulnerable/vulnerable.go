// Package vulnerable is the fixture module that the tests serve, at
// v1.0.0 and v1.1.0 alike, from a module proxy in a directory.
package vulnerable

// Bad is the symbol that the fixture entry GO-9999-0001 names.
func Bad() string { return "bad" }
