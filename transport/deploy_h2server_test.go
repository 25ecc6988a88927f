package transport

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// What a scriptedH2 server does with a request, decided when its HEADERS
// frame arrives.
type h2Act int

const (
	h2Answer       h2Act = iota // act on it once whole, answer 200
	h2GoAwayIt                  // send GOAWAY whose last stream is below it (NO_ERROR); never act
	h2RefuseIt                  // reset it with REFUSED_STREAM at once; never act
	h2ActThenReset              // act on it once whole, then reset it with PROTOCOL_ERROR
)

// More frame types and codes (RFC 9113) than rawH2 needs.
const (
	h2GoAway      = 0x7
	h2Ping        = 0x6
	h2EndHeaders  = 0x4
	h2RefusedCode = 0x7
)

// scriptedH2 is an HTTP/2 server on loopback, over TLS or cleartext with
// prior knowledge (h2c), written frame by frame so that a test decides
// what each request meets: plan(conn, stream) is asked for every request
// (conn counts connections from 1; stream is the client's stream ID). It
// counts the requests it acted on in acted.
type scriptedH2 struct {
	URL   string
	Base  *http.Transport // trusts the server, speaks only HTTP/2
	acted atomic.Int64
	plan  func(conn int, stream uint32) h2Act

	mu    sync.Mutex
	conns []*h2Conn
}

type h2Conn struct {
	c       net.Conn
	wmu     sync.Mutex
	maxSeen atomic.Uint32 // the highest stream ID seen
	pingAck chan struct{} // receives one value per PING ACK
}

func (h *h2Conn) write(typ, flags byte, stream uint32, payload []byte) error {
	var hd [9]byte
	hd[0], hd[1], hd[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	hd[3], hd[4] = typ, flags
	binary.BigEndian.PutUint32(hd[5:], stream)
	h.wmu.Lock()
	defer h.wmu.Unlock()
	_, err := h.c.Write(append(hd[:], payload...))
	return err
}

func (h *h2Conn) goAway(last uint32) error {
	var p [8]byte
	binary.BigEndian.PutUint32(p[:4], last) // NO_ERROR: the last four bytes stay zero
	return h.write(h2GoAway, 0, 0, p[:])
}

// newScriptedH2 starts the server; useTLS picks HTTP/2 over TLS, else h2c.
func newScriptedH2(t *testing.T, useTLS bool, plan func(conn int, stream uint32) h2Act) *scriptedH2 {
	t.Helper()
	s := &scriptedH2{plan: plan}
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	var ln net.Listener
	var err error
	if useTLS {
		certSrv := httptest.NewUnstartedServer(http.NotFoundHandler())
		certSrv.EnableHTTP2 = true
		certSrv.StartTLS()
		cert := certSrv.TLS.Certificates[0]
		pool := x509.NewCertPool()
		pool.AddCert(certSrv.Certificate())
		certSrv.Close()
		ln, err = tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
		tr.Protocols.SetHTTP2(true)
		s.URL = "https://" + ln.Addr().String()
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		tr.Protocols.SetUnencryptedHTTP2(true)
		if ln != nil {
			s.URL = "http://" + ln.Addr().String()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	s.Base = tr
	var wg sync.WaitGroup
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.c.Close()
		}
		s.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h := &h2Conn{c: c, pingAck: make(chan struct{}, 16)}
			s.mu.Lock()
			s.conns = append(s.conns, h)
			n := len(s.conns)
			s.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				s.serve(h, n)
			}()
		}
	}()
	return s
}

// goAwayAll sends a graceful GOAWAY on every connection, its last stream
// the highest one seen, and returns once each client has read it: the
// client answers the PING sent after it only once it has handled the
// GOAWAY before it.
func (s *scriptedH2) goAwayAll(t *testing.T) {
	s.mu.Lock()
	conns := append([]*h2Conn(nil), s.conns...)
	s.mu.Unlock()
	for _, h := range conns {
		if h.goAway(h.maxSeen.Load()) != nil || h.write(h2Ping, 0, 0, make([]byte, 8)) != nil {
			continue
		}
		<-h.pingAck
	}
}

func (s *scriptedH2) serve(h *h2Conn, conn int) {
	c := h.c
	preface := make([]byte, len(h2ClientPrefix))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != h2ClientPrefix {
		return
	}
	if h.write(h2Settings, 0, 0, nil) != nil {
		return
	}
	acts := map[uint32]h2Act{}
	for {
		var hd [9]byte
		if _, err := io.ReadFull(c, hd[:]); err != nil {
			return
		}
		n := int(hd[0])<<16 | int(hd[1])<<8 | int(hd[2])
		typ, flags, stream := hd[3], hd[4], binary.BigEndian.Uint32(hd[5:])&0x7fffffff
		if _, err := io.CopyN(io.Discard, c, int64(n)); err != nil {
			return
		}
		var err error
		switch {
		case typ == h2Settings && flags&h2Ack == 0:
			err = h.write(h2Settings, h2Ack, 0, nil)
		case typ == h2Ping && flags&h2Ack != 0:
			h.pingAck <- struct{}{}
		case typ == h2Headers:
			a := s.plan(conn, stream)
			acts[stream] = a
			switch a {
			case h2GoAwayIt:
				err = h.goAway(h.maxSeen.Load())
			case h2RefuseIt:
				var p [4]byte
				binary.BigEndian.PutUint32(p[:], h2RefusedCode)
				err = h.write(h2RSTStream, 0, stream, p[:])
			}
			h.maxSeen.Store(max(h.maxSeen.Load(), stream))
		}
		if err != nil {
			return
		}
		if (typ == h2Headers || typ == h2Data) && flags&h2EndStream != 0 {
			switch acts[stream] {
			case h2Answer:
				s.acted.Add(1)
				err = h.write(h2Headers, h2EndStream|h2EndHeaders, stream, []byte{0x88}) // :status 200, HPACK static index 8
			case h2ActThenReset:
				s.acted.Add(1)
				var p [4]byte
				binary.BigEndian.PutUint32(p[:], h2ProtocolErr)
				err = h.write(h2RSTStream, 0, stream, p[:])
			}
			if err != nil {
				return
			}
		}
	}
}
