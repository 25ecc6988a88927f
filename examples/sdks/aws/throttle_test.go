package aws

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
)

func TestErrorCode(t *testing.T) {
	tests := []struct {
		header, want string
	}{
		{"", ""},
		{"ThrottlingException", "ThrottlingException"},
		{"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException", "ProvisionedThroughputExceededException"},
		{"TooManyRequestsException:http://internal.amazon.com/coral/com.amazonaws.lambda/", "TooManyRequestsException"},
		{"aws.protocoltests#FooError:http://x", "FooError"},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.header != "" {
			h.Set(ErrorTypeHeader, tt.header)
		}
		if got := ErrorCode(h); got != tt.want {
			t.Errorf("ErrorCode(%q) = %q, want %q", tt.header, got, tt.want)
		}
	}
}

func TestErrorCodes(t *testing.T) {
	long := `{"__type":"ThrottlingException","message":"` + strings.Repeat("x", MaxErrorBody) + `"}`
	tests := []struct {
		name        string
		status      int
		contentType string
		header      string // X-Amzn-ErrorType sent by the server
		body        string
		want        string // X-Amzn-ErrorType handed back
	}{
		{"json 1.0 __type", 400, "application/x-amz-json-1.0", "", `{"__type":"com.amazon.coral.availability#ThrottlingException","message":"Rate exceeded"}`, "com.amazon.coral.availability#ThrottlingException"},
		{"rest-json code", 429, "application/json", "", `{"code":"TooManyRequestsException","message":"slow down"}`, "TooManyRequestsException"},
		{"rest-json Code", 400, "application/json", "", `{"Code":"SlowDown"}`, "SlowDown"},
		{"server header kept", 400, "application/json", "LimitExceededException", `{"__type":"Other"}`, "LimitExceededException"},
		{"success untouched", 200, "application/x-amz-json-1.0", "", `{"__type":"ThrottlingException"}`, ""},
		{"xml untouched", 503, "application/xml", "", `<Error><Code>SlowDown</Code></Error>`, ""},
		{"garbage json", 400, "application/json", "", `{"__type":`, ""},
		{"code past the limit", 400, "application/json", "", long, ""},
		{"bad content type", 400, "application/json; ;;", "", `{"__type":"ThrottlingException"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				if tt.header != "" {
					w.Header().Set(ErrorTypeHeader, tt.header)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			rt := ErrorCodes(httptestutil.NewHandlerTransport(h))
			req, _ := http.NewRequest("POST", "http://dynamodb.test/", strings.NewReader("{}"))
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got := resp.Header.Get(ErrorTypeHeader); got != tt.want {
				t.Errorf("%s = %q, want %q", ErrorTypeHeader, got, tt.want)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil || string(b) != tt.body {
				t.Errorf("body = %d bytes (err %v), want the %d bytes sent", len(b), err, len(tt.body))
			}
		})
	}
}

func TestClassify(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	post, _ := http.NewRequest("POST", "http://dynamodb.test/", nil)
	resp := func(status int, kv ...string) *http.Response {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return &http.Response{StatusCode: status, Header: h}
	}
	tests := []struct {
		name      string
		resp      *http.Response
		wantRetry bool
		wantWait  time.Duration
	}{
		{"400 ProvisionedThroughputExceeded", resp(400, ErrorTypeHeader, "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"), true, 0},
		{"400 Throttling with Retry-After", resp(400, ErrorTypeHeader, "Throttling", "Retry-After", "3"), true, 3 * time.Second},
		{"503 SlowDown", resp(503, ErrorTypeHeader, "SlowDown"), true, 0},
		{"400 ValidationException", resp(400, ErrorTypeHeader, "ValidationException"), false, 0},
		{"400 without a code", resp(400), false, 0},
		{"500 on a POST without a key: default, not retried", resp(500), false, 0},
		{"200 with a throttling header is a success", resp(200, ErrorTypeHeader, "ThrottlingException"), false, 0},
	}
	for _, tt := range tests {
		d := Classify(policy.Outcome{Request: post, Response: tt.resp, Attempt: 1, Now: now})
		// Every DynamoDB call is a POST: it is sent again when the outcome
		// is retriable and proves that AWS did not act (throttling), as
		// policy.Retry.Next decides.
		retry := d.Retry && (policy.SafeToResend(post, "") || d.DidNotAct)
		if retry != tt.wantRetry {
			t.Errorf("%s: retried = %v (%s), want %v", tt.name, retry, d.Reason, tt.wantRetry)
		}
		if d.RetryAfter != tt.wantWait {
			t.Errorf("%s: RetryAfter = %v, want %v", tt.name, d.RetryAfter, tt.wantWait)
		}
	}
}
