//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package socket

import (
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// waitSpoke waits until p's socket is no longer quiet.
func waitSpoke(t *testing.T, p *Peeker) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); p.SocketQuiet(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the socket stayed quiet")
		}
	}
}

func TestNewPeeker(t *testing.T) {
	c, _ := tcpPair(t)
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	for _, tt := range []struct {
		name string
		conn net.Conn
		want bool
	}{
		{"TCP", c, true},
		{"TLS over TCP", tls.Client(c, &tls.Config{}), true},
		{"in-memory pipe", p1, false},
		{"wrapper that hides the socket", struct{ net.Conn }{c}, false},
	} {
		if got := NewPeeker(tt.conn) != nil; got != tt.want {
			t.Errorf("%s: NewPeeker != nil is %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPeekerLooksWithoutReading: the socket is quiet until the peer
// writes; a look leaves the bytes to be read; ReadNow reads what is
// there without waiting, and nothing when nothing is.
func TestPeekerLooksWithoutReading(t *testing.T) {
	c, s := tcpPair(t)
	p := NewPeeker(c)
	if !p.SocketQuiet() {
		t.Fatal("a fresh connection's socket is not quiet")
	}
	buf := make([]byte, 16)
	if n := p.ReadNow(buf); n != 0 {
		t.Fatalf("ReadNow of a quiet socket = %d", n)
	}
	if _, err := s.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	waitSpoke(t, p)
	if p.SocketQuiet() {
		t.Fatal("a second look found the socket quiet: the look read")
	}
	if n := p.ReadNow(buf); string(buf[:n]) != "hello" {
		t.Fatalf("ReadNow = %q, want %q", buf[:n], "hello")
	}
	if !p.SocketQuiet() {
		t.Fatal("the socket is not quiet once read")
	}
	s.Close()
	waitSpoke(t, p) // an end of stream is not quiet either
}

// TestPeekerLookWrite: LookWrite writes only while the socket is quiet,
// and waits until the peer's response may be read.
func TestPeekerLookWrite(t *testing.T) {
	c, s := tcpPair(t)
	p := NewPeeker(c)
	writes := 0
	p.Write = func() error {
		writes++
		_, err := c.Write([]byte("ping"))
		return err
	}
	go func() { // the peer responds to each ping
		b := make([]byte, 4)
		for {
			if _, err := s.Read(b); err != nil {
				return
			}
			s.Write([]byte("pong"))
		}
	}()
	quiet, err := p.LookWrite()
	if !quiet || err != nil || writes != 1 || p.SawPeer() {
		t.Fatalf("LookWrite on a quiet socket = %v, %v, %d writes, SawPeer %v; want true, nil, 1, false", quiet, err, writes, p.SawPeer())
	}
	// LookWrite returned: the response can be read, and is still there.
	if p.SocketQuiet() {
		t.Fatal("LookWrite returned before the response could be read")
	}
	quiet, err = p.LookWrite()
	if quiet || err != nil || writes != 1 || !p.SawPeer() {
		t.Fatalf("LookWrite with bytes waiting = %v, %v, %d writes, SawPeer %v; want false, nil, 1, true", quiet, err, writes, p.SawPeer())
	}
	p.AckNow() // a no-op where the system has no quick ACK; never fails
}
