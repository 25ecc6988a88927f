package main

import "strings"

// compareSemver compares two semantic versions written without a "v",
// as OSV entries write them, and returns -1, 0 or +1. Build metadata is
// ignored. An invalid version sorts before every valid one, and two
// invalid versions compare equal, so a malformed "fixed" never wins.
func compareSemver(a, b string) int {
	pa, okA := parseSemver(a)
	pb, okB := parseSemver(b)
	switch {
	case !okA && !okB:
		return 0
	case !okA:
		return -1
	case !okB:
		return 1
	}
	for i := range pa.core {
		if c := compareNumeric(pa.core[i], pb.core[i]); c != 0 {
			return c
		}
	}
	return comparePrerelease(pa.pre, pb.pre)
}

// semver is a parsed version: three numeric parts and the prerelease
// identifiers, if any.
type semver struct {
	core [3]string
	pre  []string
}

// parseSemver splits "1.2.3-rc.1+meta" into its parts and reports whether
// it is a valid semantic version.
func parseSemver(v string) (semver, bool) {
	var s semver
	v, _, _ = strings.Cut(v, "+")
	core, pre, hasPre := strings.Cut(v, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return s, false
	}
	for i, p := range parts {
		if !isNumeric(p) {
			return s, false
		}
		s.core[i] = p
	}
	if hasPre {
		s.pre = strings.Split(pre, ".")
		for _, id := range s.pre {
			if id == "" || strings.Trim(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-") != "" {
				return s, false
			}
			if allDigits(id) && !isNumeric(id) {
				return s, false
			}
		}
	}
	return s, true
}

// comparePrerelease orders prerelease identifier lists: none is above
// any, numbers compare by value and sort below words, and a shorter list
// that is a prefix of a longer one sorts first.
func comparePrerelease(a, b []string) int {
	switch {
	case len(a) == 0 && len(b) == 0:
		return 0
	case len(a) == 0:
		return 1
	case len(b) == 0:
		return -1
	}
	for i := 0; i < len(a) && i < len(b); i++ {
		na, nb := allDigits(a[i]), allDigits(b[i])
		var c int
		switch {
		case na && nb:
			c = compareNumeric(a[i], b[i])
		case na:
			c = -1
		case nb:
			c = 1
		default:
			c = strings.Compare(a[i], b[i])
		}
		if c != 0 {
			return c
		}
	}
	return compareInts(len(a), len(b))
}

// compareNumeric compares two decimal numbers without leading zeros of
// any length: the longer is larger, and equal lengths compare as text.
func compareNumeric(a, b string) int {
	if c := compareInts(len(a), len(b)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func compareInts(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// isNumeric reports whether s is a decimal number without a leading zero.
func isNumeric(s string) bool {
	return allDigits(s) && (s == "0" || s[0] != '0')
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
