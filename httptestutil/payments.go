package httptestutil

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// PaymentsConfig configures a [Payments] emulator. The zero value works.
type PaymentsConfig struct {
	// ProcessingDelay is how long making a charge takes, between taking
	// the key and answering; 0 means no delay. A charge, once started,
	// completes even if the client goes away meanwhile, as a real payment
	// does.
	ProcessingDelay time.Duration
	// Header is the request header that carries the key; "" means
	// "Idempotency-Key".
	Header string
}

// PaymentsStats counts what a [Payments] emulator did.
type PaymentsStats struct {
	// Charges is how many charges were made: the side effects.
	Charges int64
	// Replays is how many requests got a stored response again.
	Replays int64
	// Conflicts is how many requests got 409 because a request with the
	// same key was still being processed.
	Conflicts int64
	// Mismatches is how many requests got 422 because their key was used
	// before with a different payload.
	Mismatches int64
	// MissingKeys is how many requests got 400 for lack of a key.
	MissingKeys int64
}

// Payments is an [http.Handler] that emulates an idempotent payments API
// as the IETF Idempotency-Key HTTP header draft describes:
//
//   - POST /charges with a JSON body {"amount": 1000, "currency": "eur"}
//     and an Idempotency-Key header makes one charge and answers 201 with
//     {"id": "ch_1", "amount": 1000, "currency": "eur", "status": "succeeded"}.
//   - The same key with the same payload (byte for byte) replays the first
//     response, status, headers and body, with "Idempotent-Replayed: true",
//     and makes no charge.
//   - The same key while its first request is still processing: 409.
//   - The same key with a different payload: 422.
//   - No key: 400. A body that is not a charge (bad JSON, amount not
//     positive, no currency): 400, not remembered under the key. A body
//     over 1 MiB: 413.
//
// Every error is an RFC 9457 problem+json body. Keys are remembered for
// the life of the emulator. Other paths answer 404, other methods on
// /charges 405.
//
// It is safe for concurrent use by multiple goroutines.
type Payments struct {
	delay  time.Duration
	header string
	mux    *http.ServeMux

	mu   sync.Mutex
	keys map[string]*paymentEntry
	seq  int

	charges, replays, conflicts, mismatches, missing atomic.Int64
}

type paymentEntry struct {
	fingerprint [sha256.Size]byte
	done        bool
	status      int
	header      http.Header
	body        []byte
}

// NewPayments returns a payments emulator configured by c.
func NewPayments(c PaymentsConfig) *Payments {
	p := &Payments{delay: c.ProcessingDelay, header: c.Header, keys: make(map[string]*paymentEntry)}
	if p.header == "" {
		p.header = "Idempotency-Key"
	}
	p.mux = http.NewServeMux()
	p.mux.HandleFunc("POST /charges", p.charge)
	p.mux.HandleFunc("/charges", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		problem(w, http.StatusMethodNotAllowed, "Method not allowed", r.Method+" /charges: charges are made with POST")
	})
	p.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, "Not found", r.URL.Path+" is not a path of this API")
	})
	return p
}

// ServeHTTP serves the payments API.
func (p *Payments) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.mux.ServeHTTP(w, r) }

// Charges reports how many charges were made.
func (p *Payments) Charges() int64 { return p.charges.Load() }

// Stats reports the emulator's counters.
func (p *Payments) Stats() PaymentsStats {
	return PaymentsStats{
		Charges:     p.charges.Load(),
		Replays:     p.replays.Load(),
		Conflicts:   p.conflicts.Load(),
		Mismatches:  p.mismatches.Load(),
		MissingKeys: p.missing.Load(),
	}
}

type chargeRequest struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

const maxChargeBody = 1 << 20

func (p *Payments) charge(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(p.header)
	if key == "" {
		p.missing.Add(1)
		problem(w, http.StatusBadRequest, "Idempotency-Key is missing",
			"this operation is idempotent and requires the "+p.header+" header")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxChargeBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem(w, http.StatusRequestEntityTooLarge, "Payload too large", fmt.Sprintf("the body is over %d bytes", maxChargeBody))
		} else {
			problem(w, http.StatusBadRequest, "Unreadable body", err.Error())
		}
		return
	}
	var req chargeRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Amount <= 0 || req.Currency == "" {
		detail := `want {"amount": positive integer, "currency": "..."}`
		if err != nil {
			detail = err.Error()
		}
		problem(w, http.StatusBadRequest, "Invalid charge", detail)
		return
	}
	fp := sha256.Sum256(body)

	p.mu.Lock()
	if e, ok := p.keys[key]; ok {
		done := e.done // the stored response is immutable once done
		p.mu.Unlock()
		switch {
		case e.fingerprint != fp:
			p.mismatches.Add(1)
			problem(w, http.StatusUnprocessableEntity, "Idempotency-Key is already used",
				"this key was used with a different payload")
		case !done:
			p.conflicts.Add(1)
			problem(w, http.StatusConflict, "A request is outstanding for this Idempotency-Key",
				"a request with this key is still being processed; retry later")
		default:
			p.replays.Add(1)
			dst := w.Header()
			for k, v := range e.header {
				dst[k] = append([]string(nil), v...)
			}
			dst.Set("Idempotent-Replayed", "true")
			w.WriteHeader(e.status)
			w.Write(e.body)
		}
		return
	}
	e := &paymentEntry{fingerprint: fp}
	p.keys[key] = e
	p.mu.Unlock()

	if p.delay > 0 {
		time.Sleep(p.delay) // the charge goes through whether the client waits or not
	}

	p.mu.Lock()
	p.seq++
	id := fmt.Sprintf("ch_%d", p.seq)
	p.charges.Add(1)
	out, _ := json.Marshal(map[string]any{"id": id, "amount": req.Amount, "currency": req.Currency, "status": "succeeded"})
	e.status = http.StatusCreated
	e.header = http.Header{"Content-Type": {"application/json"}}
	e.body = append(out, '\n')
	e.done = true
	p.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	w.Write(e.body)
}

// problem answers status with an RFC 9457 problem details body.
func problem(w http.ResponseWriter, status int, title, detail string) {
	b, _ := json.Marshal(ProblemBody{Title: title, Status: status, Detail: detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
