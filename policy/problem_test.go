package policy_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sturdyhttp/sturdy/policy"
)

const problemJSON = "application/problem+json"

// RFC 9457 §3: the "out of credit" example, with two extension members.
const rfc9457OutOfCredit = `{
 "type": "https://example.com/probs/out-of-credit",
 "title": "You do not have enough credit.",
 "detail": "Your current balance is 30, but that costs 50.",
 "instance": "/account/12345/msgs/abc",
 "balance": 30,
 "accounts": ["/account/12345",
              "/account/67890"]
}`

// RFC 9457 §3: the validation example, an "errors" extension of pointers.
const rfc9457Validation = `{
 "type": "https://example.net/validation-error",
 "title": "Your request is not valid.",
 "errors": [
             {
               "detail": "must be a positive integer",
               "pointer": "#/age"
             },
             {
               "detail": "must be 'green', 'red' or 'blue'",
               "pointer": "#/profile/color"
             }
          ]
}`

// RFC 7807 §3 (kept in RFC 9457's lineage): the "invalid-params" example.
const rfc7807InvalidParams = `{
"type": "https://example.net/validation-error",
"title": "Your request parameters didn't validate.",
"invalid-params": [ {
                      "name": "age",
                      "reason": "must be a positive integer"
                    },
                    {
                      "name": "color",
                      "reason": "must be 'green', 'red' or 'blue'"}
                  ]
}`

func ptr(b bool) *bool { return &b }

func TestIsProblem(t *testing.T) {
	tests := []struct {
		ct   string
		want bool
	}{
		{"application/problem+json", true},
		{"Application/Problem+JSON", true},
		{"APPLICATION/PROBLEM+JSON", true},
		{"application/problem+json; charset=utf-8", true},
		{"application/problem+json;charset=UTF-8", true},
		{"application/problem+json;", true},
		{" application/problem+json ", true},
		{"\tapplication/problem+json\t; q=1", true},
		{"", false},
		{"application/json", false},
		{"application/problem+xml", false},
		{"application/problem+jsonx", false},
		{"application/problem", false},
		{"text/html; charset=utf-8", false},
		{"application/problem+json, text/html", false},
		{"application/ problem+json", false},
		{"xapplication/problem+json", false},
	}
	for _, tt := range tests {
		if got := policy.IsProblem(tt.ct); got != tt.want {
			t.Errorf("IsProblem(%q) = %t, want %t", tt.ct, got, tt.want)
		}
	}
}

func TestParseProblem(t *testing.T) {
	tests := []struct {
		name string
		ct   string
		body string
		want policy.Problem
	}{
		{"rfc9457 out of credit", problemJSON + "; charset=utf-8", rfc9457OutOfCredit, policy.Problem{
			Type:     "https://example.com/probs/out-of-credit",
			Title:    "You do not have enough credit.",
			Detail:   "Your current balance is 30, but that costs 50.",
			Instance: "/account/12345/msgs/abc",
			Extensions: map[string]any{
				"balance":  30.0,
				"accounts": []any{"/account/12345", "/account/67890"},
			},
		}},
		{"rfc9457 validation", problemJSON, rfc9457Validation, policy.Problem{
			Type:  "https://example.net/validation-error",
			Title: "Your request is not valid.",
			Extensions: map[string]any{"errors": []any{
				map[string]any{"detail": "must be a positive integer", "pointer": "#/age"},
				map[string]any{"detail": "must be 'green', 'red' or 'blue'", "pointer": "#/profile/color"},
			}},
		}},
		{"rfc7807 invalid-params", problemJSON, rfc7807InvalidParams, policy.Problem{
			Type:  "https://example.net/validation-error",
			Title: "Your request parameters didn't validate.",
			Extensions: map[string]any{"invalid-params": []any{
				map[string]any{"name": "age", "reason": "must be a positive integer"},
				map[string]any{"name": "color", "reason": "must be 'green', 'red' or 'blue'"},
			}},
		}},
		{"all standard members", problemJSON, `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"try later","instance":"/req/1","is_retriable":true}`, policy.Problem{
			Type: "about:blank", Title: "Service Unavailable", Status: 503, Detail: "try later", Instance: "/req/1", Retriable: ptr(true),
		}},
		{"empty object", problemJSON, `{}`, policy.Problem{Type: "about:blank"}},
		{"whitespace around", problemJSON, " \r\n\t{\"title\":\"x\"} \n", policy.Problem{Type: "about:blank", Title: "x"}},
		{"empty type kept", problemJSON, `{"type":""}`, policy.Problem{Type: ""}},

		// Retriable and its spellings.
		{"is_retriable true", problemJSON, `{"is_retriable":true}`, policy.Problem{Type: "about:blank", Retriable: ptr(true)}},
		{"is_retriable false", problemJSON, `{"is_retriable":false}`, policy.Problem{Type: "about:blank", Retriable: ptr(false)}},
		{"is_retryable", problemJSON, `{"is_retryable":false}`, policy.Problem{Type: "about:blank", Retriable: ptr(false)}},
		{"retriable", problemJSON, `{"retriable":true}`, policy.Problem{Type: "about:blank", Retriable: ptr(true)}},
		{"retryable", problemJSON, `{"retryable":false}`, policy.Problem{Type: "about:blank", Retriable: ptr(false)}},
		{"is_retriable wins", problemJSON, `{"retryable":true,"retriable":true,"is_retryable":true,"is_retriable":false}`, policy.Problem{Type: "about:blank", Retriable: ptr(false)}},
		{"is_retryable before retriable", problemJSON, `{"retriable":false,"is_retryable":true}`, policy.Problem{Type: "about:blank", Retriable: ptr(true)}},
		{"string is not a boolean", problemJSON, `{"is_retriable":"true"}`, policy.Problem{Type: "about:blank"}},
		{"number is not a boolean", problemJSON, `{"is_retriable":1}`, policy.Problem{Type: "about:blank"}},
		{"null is not a boolean", problemJSON, `{"is_retriable":null}`, policy.Problem{Type: "about:blank"}},
		{"non-boolean skipped for next spelling", problemJSON, `{"is_retriable":"yes","retryable":true}`, policy.Problem{Type: "about:blank", Retriable: ptr(true)}},
		{"other case is an extension", problemJSON, `{"Is_Retriable":true}`, policy.Problem{Type: "about:blank", Extensions: map[string]any{"Is_Retriable": true}}},
		{"last duplicate wins", problemJSON, `{"is_retriable":true,"is_retriable":false}`, policy.Problem{Type: "about:blank", Retriable: ptr(false)}},

		// Members of the wrong type are ignored, never errors, never extensions.
		{"type not a string", problemJSON, `{"type":5,"title":"t"}`, policy.Problem{Type: "about:blank", Title: "t"}},
		{"strings not strings", problemJSON, `{"title":{},"detail":[1],"instance":true}`, policy.Problem{Type: "about:blank"}},
		{"status as string", problemJSON, `{"status":"503"}`, policy.Problem{Type: "about:blank"}},
		{"status fractional", problemJSON, `{"status":503.5}`, policy.Problem{Type: "about:blank"}},
		{"status exponent", problemJSON, `{"status":5.03e2}`, policy.Problem{Type: "about:blank", Status: 503}},
		{"status too small", problemJSON, `{"status":99}`, policy.Problem{Type: "about:blank"}},
		{"status too large", problemJSON, `{"status":600}`, policy.Problem{Type: "about:blank"}},
		{"status negative", problemJSON, `{"status":-503}`, policy.Problem{Type: "about:blank"}},
		{"status huge", problemJSON, `{"status":1e400}`, policy.Problem{Type: "about:blank"}},
		{"status bounds", problemJSON, `{"status":100}`, policy.Problem{Type: "about:blank", Status: 100}},
		{"status upper bound", problemJSON, `{"status":599}`, policy.Problem{Type: "about:blank", Status: 599}},
		{"out of range extension is nil", problemJSON, `{"title":"t","big":-1e400,"n":1}`, policy.Problem{Type: "about:blank", Title: "t", Extensions: map[string]any{"big": nil, "n": 1.0}}},
		{"provider style", problemJSON, `{"type":"https://api.example.com/errors/overloaded","title":"Overloaded","status":529,"retryable":true,"request_id":"req_123"}`, policy.Problem{
			Type: "https://api.example.com/errors/overloaded", Title: "Overloaded", Status: 529, Retriable: ptr(true), Extensions: map[string]any{"request_id": "req_123"},
		}},
	}
	for _, tt := range tests {
		got, err := policy.ParseProblem(tt.ct, []byte(tt.body))
		if err != nil {
			t.Errorf("%s: ParseProblem(%q, %q) error %v, want nil", tt.name, tt.ct, tt.body, err)
			continue
		}
		if !reflect.DeepEqual(*got, tt.want) {
			t.Errorf("%s: ParseProblem(%q, %q) =\n%s\nwant\n%s", tt.name, tt.ct, tt.body, show(got), show(&tt.want))
		}
	}
}

// show prints a Problem with its Retriable value rather than its address.
func show(p *policy.Problem) string {
	r := "nil"
	if p.Retriable != nil {
		r = fmt.Sprint(*p.Retriable)
	}
	return fmt.Sprintf("{Type:%q Title:%q Detail:%q Instance:%q Status:%d Retriable:%s Extensions:%#v}",
		p.Type, p.Title, p.Detail, p.Instance, p.Status, r, p.Extensions)
}

func TestParseProblemErrors(t *testing.T) {
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	tests := []struct {
		name string
		ct   string
		body string
		want error
	}{
		{"json content type", "application/json", rfc9457OutOfCredit, policy.ErrNotProblem},
		{"no content type", "", rfc9457OutOfCredit, policy.ErrNotProblem},
		{"html", "text/html", "<html>", policy.ErrNotProblem},
		{"empty body", problemJSON, "", policy.ErrProblemBody},
		{"spaces only", problemJSON, "  \n", policy.ErrProblemBody},
		{"not JSON", problemJSON, "Service Unavailable", policy.ErrProblemBody},
		{"html body", problemJSON, "<html><body>502 Bad Gateway</body></html>", policy.ErrProblemBody},
		{"null", problemJSON, "null", policy.ErrProblemBody},
		{"array", problemJSON, `[{"title":"x"}]`, policy.ErrProblemBody},
		{"string", problemJSON, `"oops"`, policy.ErrProblemBody},
		{"number", problemJSON, `503`, policy.ErrProblemBody},
		{"boolean", problemJSON, `true`, policy.ErrProblemBody},
		{"truncated", problemJSON, rfc9457OutOfCredit[:60], policy.ErrProblemBody},
		{"trailing garbage", problemJSON, `{"title":"x"} trailing`, policy.ErrProblemBody},
		{"two objects", problemJSON, `{}{}`, policy.ErrProblemBody},
		{"single quotes", problemJSON, `{'title':'x'}`, policy.ErrProblemBody},
		{"byte order mark", problemJSON, "\ufeff{}", policy.ErrProblemBody},
		{"too deep", problemJSON, `{"x":` + deep + `}`, policy.ErrProblemBody},
	}
	for _, tt := range tests {
		p, err := policy.ParseProblem(tt.ct, []byte(tt.body))
		if !errors.Is(err, tt.want) || p != nil {
			t.Errorf("%s: ParseProblem(%q, %.40q) = %v, %v; want nil, %v", tt.name, tt.ct, tt.body, p, err, tt.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), "policy: ") {
			t.Errorf("%s: error %q, want it to start with %q", tt.name, err, "policy: ")
		}
	}
}

func BenchmarkParseProblem(b *testing.B) {
	for _, bc := range []struct{ name, body string }{
		{"rfc9457", rfc9457OutOfCredit},
		{"small", `{"type":"about:blank","title":"Service Unavailable","status":503,"is_retriable":true}`},
	} {
		body := []byte(bc.body)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := policy.ParseProblem(problemJSON, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("not-problem", func(b *testing.B) {
		body := []byte(rfc9457OutOfCredit)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := policy.ParseProblem("application/json; charset=utf-8", body); err == nil {
				b.Fatal("no error for application/json")
			}
		}
	})
}

func ExampleParseProblem() {
	body := []byte(`{
		"type": "https://example.com/probs/out-of-credit",
		"title": "You do not have enough credit.",
		"status": 403,
		"is_retriable": false,
		"balance": 30
	}`)
	p, err := policy.ParseProblem("application/problem+json", body)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Status, p.Title)
	fmt.Println("retriable:", *p.Retriable)
	fmt.Println("balance:", p.Extensions["balance"])

	_, err = policy.ParseProblem("text/html", []byte("<h1>502</h1>"))
	fmt.Println(err)
	// Output:
	// 403 You do not have enough credit.
	// retriable: false
	// balance: 30
	// policy: content type is not application/problem+json (got "text/html")
}
