//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package socket

import (
	"crypto/tls"
	"net"
	"syscall"
)

// This file holds the Peeker of the systems that have MSG_PEEK and
// MSG_DONTWAIT. A Peeker has no lock: it is owned by the holder of its
// connection's read turn.

// A Peeker looks at a connection's socket without reading from it: a recv
// with MSG_PEEK and MSG_DONTWAIT. It is made once per connection, so that
// a look allocates nothing; it belongs to the holder of the connection's
// read turn.
type Peeker struct {
	rc    syscall.RawConn
	look  func(fd uintptr) // p.recv, bound once
	quiet bool
	b     [1]byte

	// Write is the connection's flush, which LookWrite calls; set once
	// by the owner of the Peeker before its first LookWrite.
	Write func() error

	// LookWrite's state: step is p.lookThenWrite, bound once; looked and
	// werr are what the step did.
	step   func(fd uintptr) bool
	looked bool
	werr   error

	// ReadNow's state: nowStep is p.readStep, bound once; nowBuf and
	// nowN are its buffer and what it read.
	nowStep func(fd uintptr) bool
	nowBuf  []byte
	nowN    int
}

// ReadNow reads into b what the socket holds already, without waiting:
// one read, which returns 0 if nothing is there (or at the end of the
// stream, or on an error, which the next read from the connection meets
// again). Only for a connection with nothing between it and the socket.
func (p *Peeker) ReadNow(b []byte) int {
	if p.nowStep == nil {
		p.nowStep = p.readStep
	}
	p.nowBuf, p.nowN = b, 0
	p.rc.Read(p.nowStep)
	p.nowBuf = nil
	return p.nowN
}

func (p *Peeker) readStep(fd uintptr) bool {
	n, err := syscall.Read(int(fd), p.nowBuf)
	if err == nil && n > 0 {
		p.nowN = n
	}
	return true // never wait
}

// NewPeeker returns a Peeker for conn, or nil if conn cannot be looked at
// without reading it. A TCP connection of the operating system's can, and
// so can a connection that exposes its socket (syscall.Conn), as a thin
// wrapper that counts or traces does by promising that it buffers nothing.
// A TLS connection is looked at through its socket: the records it already
// holds are checked by the caller. Any other wrapper may hold
// bytes of its own (a proxy's buffer), so it is never looked at this way.
func NewPeeker(conn net.Conn) *Peeker {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	p := &Peeker{rc: rc}
	p.look = p.recv
	p.step = p.lookThenWrite
	return p
}

func (p *Peeker) recv(fd uintptr) {
	_, _, err := syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	p.quiet = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
}

// SocketQuiet reports whether the socket has nothing to read, neither
// bytes nor an end of stream nor an error, without reading or waiting.
func (p *Peeker) SocketQuiet() bool {
	p.quiet = false
	// Control, not Read: nothing waits, and the reader goroutine, which
	// rests, holds no read of its own on the socket.
	err := p.rc.Control(p.look)
	return err == nil && p.quiet
}

// LookWrite looks at the socket and, if it is quiet, writes (p.Write) and
// then waits until the socket may have something to read, all in one
// RawConn.Read: its readiness is reset before the look, so a response that
// comes at any time after the look ends the wait. It
// reports whether the socket was looked at and found quiet, and write's
// error. Whatever ended the wait early (a read deadline, a close), the
// read that follows reports.
func (p *Peeker) LookWrite() (quiet bool, err error) {
	p.looked, p.quiet, p.werr = false, false, nil
	p.rc.Read(p.step)
	quiet, err = p.looked && p.quiet, p.werr
	p.werr = nil
	return quiet, err
}

// SawPeer reports whether the last LookWrite looked at the socket and found
// something there (bytes, an end of stream or an error): the server spoke,
// or closed, while the connection was idle.
func (p *Peeker) SawPeer() bool { return p.looked && !p.quiet }

func (p *Peeker) lookThenWrite(fd uintptr) bool {
	if p.looked {
		return true // the wait ended
	}
	p.looked = true
	p.recv(fd)
	if !p.quiet {
		return true
	}
	if p.werr = p.Write(); p.werr != nil {
		return true
	}
	return false // wait for the response
}
