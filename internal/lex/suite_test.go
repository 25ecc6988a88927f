package lex

import (
	"encoding/base32"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// suiteEnv names a directory holding the JSON files of the httpwg
// structured-field-tests suite (github.com/httpwg/structured-field-tests).
// The suite is not kept in this repository; TestSFSuite runs it when the
// variable is set and reports how many List and Item cases pass. The
// committed vectors of sf_test.go cover the same classes of case.
const suiteEnv = "STURDY_SF_TESTS"

type suiteCase struct {
	Name       string   `json:"name"`
	Raw        []string `json:"raw"`
	HeaderType string   `json:"header_type"`
	Expected   any      `json:"expected"`
	MustFail   bool     `json:"must_fail"`
	CanFail    bool     `json:"can_fail"`
}

func TestSFSuite(t *testing.T) {
	dir := os.Getenv(suiteEnv)
	if dir == "" {
		t.Skip(suiteEnv + " not set")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no suite files in %s (%v)", dir, err)
	}
	total, passed := 0, 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cases []suiteCase
		if err := json.Unmarshal(b, &cases); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, c := range cases {
			if c.HeaderType != "list" && c.HeaderType != "item" {
				continue
			}
			total++
			got, ok := parseForSuite(c.HeaderType, strings.Join(c.Raw, ", "))
			switch {
			case c.MustFail:
				if !ok {
					passed++
				} else {
					t.Errorf("%s: %q: parsed as %v, want failure", filepath.Base(f), c.Name, got)
				}
			case !ok && c.CanFail:
				passed++
			case !ok:
				t.Errorf("%s: %q: %q failed to parse, want %v", filepath.Base(f), c.Name, c.Raw, c.Expected)
			case !reflect.DeepEqual(got, c.Expected):
				t.Errorf("%s: %q: got %#v, want %#v", filepath.Base(f), c.Name, got, c.Expected)
			default:
				passed++
			}
		}
	}
	t.Logf("structured-field-tests: %d of %d List and Item cases pass", passed, total)
}

// parseForSuite parses s as a List or an Item and returns it in the
// suite's JSON model.
func parseForSuite(typ, s string) (any, bool) {
	if typ == "item" {
		it, p, ok := ParseItem(s)
		if !ok {
			return nil, false
		}
		return []any{jsonItem(it), jsonParams(p)}, true
	}
	l := NewList(s)
	out := []any{}
	for {
		m, ok := l.Next()
		if !ok {
			break
		}
		if !m.Inner {
			out = append(out, []any{jsonItem(m.Item), jsonParams(m.Params)})
			continue
		}
		inner := []any{}
		for it, p := range m.Items() {
			inner = append(inner, []any{jsonItem(it), jsonParams(p)})
		}
		out = append(out, []any{inner, jsonParams(m.Params)})
	}
	if l.Err() {
		return nil, false
	}
	return out, true
}

func jsonItem(it Item) any {
	typed := func(typ string, v any) any { return map[string]any{"__type": typ, "value": v} }
	switch it.Kind {
	case Integer, Decimal:
		return it.Float()
	case String:
		s, _ := it.Str()
		return s
	case Token:
		return typed("token", it.Raw)
	case Binary:
		return typed("binary", base32.StdEncoding.EncodeToString(it.Bytes()))
	case Boolean:
		return it.Int == 1
	case Date:
		return typed("date", float64(it.Int))
	case DisplayString:
		return typed("displaystring", it.Display())
	}
	return nil
}

// jsonParams lists parameters in order of first appearance, a repeated
// key keeping its place and taking the last value.
func jsonParams(p Params) any {
	out := []any{}
	at := map[string]int{}
	for k, v := range p.All() {
		if i, ok := at[k]; ok {
			out[i] = []any{k, jsonItem(v)}
			continue
		}
		at[k] = len(out)
		out = append(out, []any{k, jsonItem(v)})
	}
	return out
}
