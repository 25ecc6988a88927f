package policy

import (
	"errors"
	"fmt"
	"net/url"
	"testing"
)

func TestNotProcessed(t *testing.T) {
	goAway := "http2: Transport: cannot retry err [http2: Transport received Server's graceful shutdown GOAWAY] after Request.Body was written; define Request.GetBody to avoid this error"
	refused := "http2: Transport: cannot retry err [stream error: stream ID 7; REFUSED_STREAM; received from peer] after Request.Body was written; define Request.GetBody to avoid this error"
	tests := []struct {
		name string
		err  error
		want string // the row's Name; "" for none
	}{
		{"goaway", errors.New(goAway), "graceful GOAWAY"},
		{"refused", errors.New(refused), "REFUSED_STREAM"},
		{"refused, long stream ID", errors.New("http2: Transport: cannot retry err [stream error: stream ID 2147483647; REFUSED_STREAM; received from peer] after Request.Body was written; define Request.GetBody to avoid this error"), "REFUSED_STREAM"},
		{"cannot rewind", errors.New("net/http: cannot rewind body after connection loss"), "cannot rewind body"},
		{"closed idle", errors.New("http: server closed idle connection"), "server closed idle connection"},
		{"idle reset", fmt.Errorf("readLoopPeekFailLocked: %w", errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer")), "idle connection broken"},
		{"idle, unsolicited bytes", errors.New("readLoopPeekFailLocked: %!w(<nil>)"), "idle connection broken"},
		{"wrapped with %w", fmt.Errorf("transport: giving up: %w", errors.New("http: server closed idle connection")), "server closed idle connection"},
		{"in a url.Error", &url.Error{Op: "Post", URL: "http://a", Err: errors.New(goAway)}, "graceful GOAWAY"},
		{"in a join", errors.Join(errors.New("other"), errors.New(refused)), "REFUSED_STREAM"},

		// What proves nothing.
		{"nil", nil, ""},
		{"protocol error reset", errors.New("http2: Transport: cannot retry err [stream error: stream ID 1; PROTOCOL_ERROR; received from peer] after Request.Body was written; define Request.GetBody to avoid this error"), ""},
		{"refused, not from the peer", errors.New("http2: Transport: cannot retry err [stream error: stream ID 1; REFUSED_STREAM] after Request.Body was written; define Request.GetBody to avoid this error"), ""},
		{"refused, no stream ID", errors.New("http2: Transport: cannot retry err [stream error: stream ID ; REFUSED_STREAM; received from peer] after Request.Body was written; define Request.GetBody to avoid this error"), ""},
		{"refused, stream ID not a number", errors.New("http2: Transport: cannot retry err [stream error: stream ID 1x; REFUSED_STREAM; received from peer] after Request.Body was written; define Request.GetBody to avoid this error"), ""},
		{"goaway, connection closed", errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1, ErrCode=NO_ERROR, debug=\"\""), ""},
		{"text inside a longer message", fmt.Errorf("proxy: http: server closed idle connection"), ""},
		{"eof", errors.New("EOF"), ""},
		{"peek failure inside a longer message", errors.New("proxy: readLoopPeekFailLocked: EOF"), ""},
		{"broken connection", errors.New("net/http: HTTP/1.x transport connection broken: write: broken pipe"), ""},
	}
	for _, tt := range tests {
		row, ok := NotProcessed(tt.err)
		if got := row.Name; ok != (tt.want != "") || got != tt.want {
			t.Errorf("%s: NotProcessed(%v) = %q, %v; want %q", tt.name, tt.err, got, ok, tt.want)
		}
	}
}

func TestUnprocessedOutcomesIsACopy(t *testing.T) {
	rows := UnprocessedOutcomes()
	rows[0].Text = "changed"
	if got := UnprocessedOutcomes()[0].Text; got == "changed" {
		t.Errorf("UnprocessedOutcomes()[0].Text = %q after a caller changed its copy", got)
	}
}

func TestUnprocessedIsDidNotAct(t *testing.T) {
	d := DefaultClassifier(Outcome{Err: errors.New("http: server closed idle connection"), Attempt: 1})
	if !d.Retry || !d.DidNotAct {
		t.Errorf("DefaultClassifier(server closed idle connection) = %+v, want Retry and DidNotAct", d)
	}
	d = DefaultClassifier(Outcome{Err: errors.New("http2: Transport: cannot retry err [stream error: stream ID 1; PROTOCOL_ERROR; received from peer] after Request.Body was written; define Request.GetBody to avoid this error"), Attempt: 1})
	if d.DidNotAct {
		t.Errorf("DefaultClassifier(PROTOCOL_ERROR reset) = %+v, want no DidNotAct", d)
	}
}

func TestUnprocessedSaysNothingOfTheHost(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want HostVerdict
	}{
		{errors.New("http: server closed idle connection"), HostIgnored},
		{errors.New("http2: Transport: cannot retry err [http2: Transport received Server's graceful shutdown GOAWAY] after Request.Body was written; define Request.GetBody to avoid this error"), HostIgnored},
		{errors.New("http2: Transport: cannot retry err [stream error: stream ID 1; PROTOCOL_ERROR; received from peer] after Request.Body was written; define Request.GetBody to avoid this error"), HostFailing},
	} {
		if got := Judge(Outcome{Err: tt.err}).Host; got != tt.want {
			t.Errorf("Judge(%q).Host = %v, want %v", tt.err, got, tt.want)
		}
	}
}
