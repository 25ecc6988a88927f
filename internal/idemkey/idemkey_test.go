package idemkey

import (
	"fmt"
	"net/http"
	"testing"
)

func TestCloneWith(t *testing.T) {
	h := http.Header{"A": {"1", "2"}, "B": nil, "C": {}, "Idempotency-Key": {"old"}}
	got := CloneWith(h, "Idempotency-Key", "new")
	want := http.Header{"A": {"1", "2"}, "B": nil, "C": {}, "Idempotency-Key": {"new"}}
	if fmt.Sprint(got) != fmt.Sprint(want) || got["B"] != nil || got["C"] == nil {
		t.Errorf("CloneWith = %#v, want %#v", got, want)
	}
	got["A"] = append(got["A"], "3") // must not write into h's values
	if len(h["A"]) != 2 || h["Idempotency-Key"][0] != "old" {
		t.Errorf("original changed: %#v", h)
	}
	if got := CloneWith(nil, "K", "v"); len(got) != 1 || got.Get("K") != "v" {
		t.Errorf("CloneWith(nil) = %#v", got)
	}
}
