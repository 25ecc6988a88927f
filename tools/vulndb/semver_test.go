package main

import "testing"

func TestCompareSemver(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"1.2.3", "1.2.3", 0},
		{"1.2.3", "1.2.4", -1},
		{"1.10.0", "1.9.0", 1},
		{"2.0.0", "10.0.0", -1},
		{"1.26.0-0", "1.26.0", -1},
		{"1.26.0-0", "1.25.9", 1},
		{"1.27.0-rc.3", "1.27.0-rc.10", -1},
		{"1.0.0-alpha", "1.0.0-alpha.1", -1},
		{"1.0.0-1", "1.0.0-alpha", -1},
		{"1.0.0-RC.1", "1.0.0-rc.1", -1},
		{"10.11.0-rc1+incompatible", "10.11.0+incompatible", -1},
		{"1.0.0+a", "1.0.0+b", 0},
		{"0.0.0-20250721152936-fe86ceb2c3fa", "0.0.0-20260626085133-7cb96ac80a6d", -1},
		{"1.9.10-0.20260703131214-23d1934099b0", "1.9.10", -1},
		{"1.9.10-0.20260703131214-23d1934099b0", "1.9.9", 1},
		// Invalid versions sort below every valid one.
		{"", "0.0.0", -1},
		{"1.2", "0.0.1", -1},
		{"v1.2.3", "0.0.1", -1},
		{"01.2.3", "0.0.1", -1},
		{"1.2.3-01", "0.0.1", -1},
		{"1.2.3-", "0.0.1", -1},
		{"1.2.3-a..b", "0.0.1", -1},
		{"", "junk", 0},
	}
	for _, tt := range tests {
		if got := compareSemver(tt.a, tt.b); got != tt.want {
			t.Errorf("compareSemver(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := compareSemver(tt.b, tt.a); got != -tt.want {
			t.Errorf("compareSemver(%q, %q) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
}
