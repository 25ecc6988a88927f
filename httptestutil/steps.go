package httptestutil

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"
)

// Status is a step that answers code with body and the given headers,
// written as key, value pairs: Status(503, "busy", "Retry-After", "2").
// A key without a value (an odd count) gets an empty value. Keys are
// canonicalized as [http.Header.Add] does; repeat a key to send it twice.
func Status(code int, body string, headerKV ...string) Step {
	h := pairs(headerKV)
	return newStep(fmt.Sprintf("Status(%d)", code), func(w http.ResponseWriter, r *http.Request) {
		writeResponse(w, code, h, body)
	})
}

// JSON is a step that answers code with v encoded as JSON
// ("application/json") and the given headers, as for [Status]. A value
// that cannot be encoded answers 500 with the encoding error.
func JSON(code int, v any, headerKV ...string) Step {
	h := pairs(headerKV)
	b, err := json.Marshal(v)
	return newStep(fmt.Sprintf("JSON(%d)", code), func(w http.ResponseWriter, r *http.Request) {
		if err != nil {
			http.Error(w, "httptestutil: JSON step: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if _, ok := h["Content-Type"]; !ok {
			w.Header().Set("Content-Type", "application/json")
		}
		writeResponse(w, code, h, string(b))
	})
}

// ProblemBody is an RFC 9457 problem details object. Empty members are
// left out of the JSON.
type ProblemBody struct {
	// Type is a URI reference that names the problem type; empty leaves it
	// out (a client then reads it as "about:blank").
	Type string
	// Title is a short summary of the problem type; empty leaves it out.
	Title string
	// Status is the HTTP status code in the body; 0 means the status of
	// the response.
	Status int
	// Detail explains this occurrence; empty leaves it out.
	Detail string
	// Instance is a URI reference for this occurrence; empty leaves it out.
	Instance string
	// Extensions are more members, written beside the standard ones, as
	// "is_retriable": false or "retry_after": 3. A key that collides with
	// a standard member is ignored.
	Extensions map[string]any
}

// MarshalJSON encodes p as a problem details object.
func (p ProblemBody) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(p.Extensions)+5)
	for k, v := range p.Extensions {
		m[k] = v
	}
	for k, v := range map[string]string{"type": p.Type, "title": p.Title, "detail": p.Detail, "instance": p.Instance} {
		delete(m, k)
		if v != "" {
			m[k] = v
		}
	}
	delete(m, "status")
	if p.Status != 0 {
		m["status"] = p.Status
	}
	return json.Marshal(m)
}

// Problem is a step that answers status with p as an RFC 9457 problem
// details body ("application/problem+json") and the given headers, as for
// [Status]. p.Status 0 is filled with status.
func Problem(status int, p ProblemBody, headerKV ...string) Step {
	if p.Status == 0 {
		p.Status = status
	}
	h := pairs(headerKV)
	b, err := json.Marshal(p)
	return newStep(fmt.Sprintf("Problem(%d)", status), func(w http.ResponseWriter, r *http.Request) {
		if err != nil {
			http.Error(w, "httptestutil: Problem step: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if _, ok := h["Content-Type"]; !ok {
			w.Header().Set("Content-Type", "application/problem+json")
		}
		writeResponse(w, code(status), h, string(b))
	})
}

// RetryAfterSeconds is a step that answers code (usually 429 or 503) with
// "Retry-After: secs".
func RetryAfterSeconds(code, secs int) Step {
	s := Status(code, http.StatusText(code), "Retry-After", strconv.Itoa(secs))
	s.name = fmt.Sprintf("RetryAfterSeconds(%d, %d)", code, secs)
	return s
}

// RetryAfterDate is a step that answers code with Retry-After set to the
// HTTP-date of t (which has one-second precision) and a Date header of
// the time the response is written, so a client can measure the wait
// against the server's clock.
func RetryAfterDate(code int, t time.Time) Step {
	date := t.UTC().Format(http.TimeFormat)
	return newStep(fmt.Sprintf("RetryAfterDate(%d, %s)", code, date), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", time.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("Retry-After", date)
		writeResponse(w, code, nil, http.StatusText(code))
	})
}

// RetryAfterMS is a step that answers code with "retry-after-ms: ms", the
// millisecond header OpenAI and Anthropic send beside Retry-After.
func RetryAfterMS(code int, ms int64) Step {
	s := Status(code, http.StatusText(code), "Retry-After-Ms", strconv.FormatInt(ms, 10))
	s.name = fmt.Sprintf("RetryAfterMS(%d, %d)", code, ms)
	return s
}

// Handler is a step that lets h answer the request.
func Handler(h http.Handler) Step {
	if h == nil {
		h = http.NotFoundHandler()
	}
	return Step{h: h, times: 1, name: "Handler"}
}

// Hang is a step that never answers: it waits until the client goes away
// (its request context ends, as when the client cancels, times out or
// closes the connection, or the server closes), then returns without
// writing.
func Hang() Step {
	return newStep("Hang", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
}

// Delay is a step that waits d before letting next answer. If the client
// goes away first, it returns without writing and next never runs. The
// wait uses a timer, so it runs on virtual time in a synctest bubble.
func Delay(d time.Duration, next Step) Step {
	return newStep(fmt.Sprintf("Delay(%v, %s)", d, next.name), func(w http.ResponseWriter, r *http.Request) {
		if !sleep(r, d) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Reset is a step that drops the connection without a response, as a
// crashed server or a middlebox does. On HTTP/1 it hijacks the connection
// and closes it (on TCP with SO_LINGER 0, so the client gets a RST); the
// request body is not read. Where hijacking is not supported (HTTP/2,
// [HandlerTransport]) it aborts the handler with [http.ErrAbortHandler],
// which resets the stream.
//
// Mind that [http.Transport] itself resends a replayable request (GET,
// HEAD, OPTIONS, TRACE, or one with an Idempotency-Key header, whose body
// can be sent again) once when a connection it reused fails before any
// response: the resend takes the next step of a script. A test that counts attempts should disable
// keep-alives or read the count from a [Recorder].
func Reset() Step {
	return newStep("Reset", func(w http.ResponseWriter, r *http.Request) {
		cut(w)
	})
}

// ResetAfterRead is a step that reads the whole request body and then
// drops the connection as [Reset] does: the server got everything, the
// client gets nothing, and cannot tell whether the request was acted on.
func ResetAfterRead() Step {
	return newStep("ResetAfterRead", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		cut(w)
	})
}

// CutAfter is a step that runs h to the end, then drops the connection
// without sending what h wrote: the "response lost after the server
// acted" fault. h writes into a buffer, so it sees a normal
// [http.ResponseWriter] (without Flush or Hijack) and its side effects all
// happen; only the client misses the answer.
//
// A typical script cuts the first attempts and lets a later one through:
// Script(CutAfter(h).Times(2), Handler(h).Forever()).
func CutAfter(h http.Handler) Step {
	if h == nil {
		h = http.NotFoundHandler()
	}
	return newStep("CutAfter", func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(httptest.NewRecorder(), r)
		cut(w)
	})
}

// SlowBody is a step that answers status with body sent chunk bytes at a
// time, flushing each chunk and waiting every between chunks (the first
// chunk goes at once, with the headers). The Content-Length is declared
// up front. If the client goes away it stops. chunk < 1 means 1.
func SlowBody(status int, body string, chunk int, every time.Duration) Step {
	chunk = max(chunk, 1)
	return newStep(fmt.Sprintf("SlowBody(%d)", status), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
		w.WriteHeader(code(status))
		rc := http.NewResponseController(w)
		for i := 0; i < len(body); i += chunk {
			if i > 0 && !sleep(r, every) {
				return
			}
			if _, err := io.WriteString(w, body[i:min(i+chunk, len(body))]); err != nil {
				return
			}
			rc.Flush()
		}
	})
}

// Truncated is a step that answers status declaring a Content-Length of
// declaredLen but sends only sent, then ends the response: the client
// reads sent and then gets [io.ErrUnexpectedEOF]. A declaredLen not
// larger than len(sent) is raised to len(sent)+1, so the body is always
// short.
func Truncated(status int, declaredLen int, sent string) Step {
	declaredLen = max(declaredLen, len(sent)+1)
	return newStep(fmt.Sprintf("Truncated(%d)", status), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(declaredLen))
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
		w.WriteHeader(code(status))
		io.WriteString(w, sent)
		http.NewResponseController(w).Flush()
		// The server sees fewer bytes than declared and closes the
		// connection after the handler returns.
	})
}

// cut drops the connection under w without a response.
func cut(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// sleep waits d, or until r's client goes away; it reports whether the
// whole wait passed.
func sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// pairs turns key, value, key, value... into a header.
func pairs(kv []string) http.Header {
	h := make(http.Header, (len(kv)+1)/2)
	for i := 0; i < len(kv); i += 2 {
		v := ""
		if i+1 < len(kv) {
			v = kv[i+1]
		}
		h.Add(kv[i], v)
	}
	return h
}

// code maps a status the server would refuse (below 100 or above 999) to
// 500, so a mistaken step gives an answer instead of a server panic.
func code(status int) int {
	if status < 100 || status > 999 {
		return http.StatusInternalServerError
	}
	return status
}

func writeResponse(w http.ResponseWriter, status int, h http.Header, body string) {
	dst := w.Header()
	for k, vs := range h {
		dst[k] = append(dst[k], vs...)
	}
	if _, ok := dst["Content-Type"]; !ok && body != "" {
		dst.Set("Content-Type", "text/plain; charset=utf-8")
	}
	w.WriteHeader(code(status))
	io.WriteString(w, body)
}
