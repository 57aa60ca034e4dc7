//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package pipelined

import (
	"crypto/tls"
	"net"
	"syscall"
)

// A peeker looks at a connection's socket without reading from it: a recv
// with MSG_PEEK and MSG_DONTWAIT. It is made once per connection, so that
// a look allocates nothing; it belongs to the holder of the read turn
// (direct.go).
type peeker struct {
	rc    syscall.RawConn
	look  func(fd uintptr) // p.recv, bound once
	quiet bool
	b     [1]byte

	// lookWrite's state: write is the connection's flush (bound once by
	// newPconn), step is p.lookThenWrite, bound once; looked and werr
	// are what the step did.
	write  func() error
	step   func(fd uintptr) bool
	looked bool
	werr   error

	// readNow's state: nowStep is p.readStep, bound once; nowBuf and
	// nowN are its buffer and what it read.
	nowStep func(fd uintptr) bool
	nowBuf  []byte
	nowN    int
}

// readNow reads into b what the socket holds already, without waiting:
// one read, which returns 0 if nothing is there (or at the end of the
// stream, or on an error, which the next read from the connection meets
// again). Only for a connection with nothing between it and the socket
// (pconn.readsNow).
func (p *peeker) readNow(b []byte) int {
	if p.nowStep == nil {
		p.nowStep = p.readStep
	}
	p.nowBuf, p.nowN = b, 0
	p.rc.Read(p.nowStep)
	p.nowBuf = nil
	return p.nowN
}

func (p *peeker) readStep(fd uintptr) bool {
	n, err := syscall.Read(int(fd), p.nowBuf)
	if err == nil && n > 0 {
		p.nowN = n
	}
	return true // never wait
}

// newPeeker returns a peeker for conn, or nil if conn cannot be looked at
// without reading it. A TCP connection of the operating system's can, and
// so can a connection that exposes its socket (syscall.Conn), as a thin
// wrapper that counts or traces does by promising that it buffers nothing.
// A TLS connection is looked at through its socket: the records it already
// holds are checked through it (pconn.quiet). Any other wrapper may hold
// bytes of its own (a proxy's buffer), so it is never looked at this way.
func newPeeker(conn net.Conn) *peeker {
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
	p := &peeker{rc: rc}
	p.look = p.recv
	p.step = p.lookThenWrite
	return p
}

func (p *peeker) recv(fd uintptr) {
	_, _, err := syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	p.quiet = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
}

// socketQuiet reports whether the socket has nothing to read, neither
// bytes nor an end of stream nor an error, without reading or waiting.
func (p *peeker) socketQuiet() bool {
	p.quiet = false
	// Control, not Read: nothing waits, and the reader goroutine, which
	// rests, holds no read of its own on the socket.
	err := p.rc.Control(p.look)
	return err == nil && p.quiet
}

// lookWrite looks at the socket and, if it is quiet, writes (p.write) and
// then waits until the socket may have something to read, all in one
// RawConn.Read: its readiness is reset before the look, so an answer that
// comes at any time after the look ends the wait (pconn.writeHeld). It
// reports whether the socket was looked at and found quiet, and write's
// error. Whatever ended the wait early (a read deadline, a close), the
// read that follows reports.
func (p *peeker) lookWrite() (quiet bool, err error) {
	p.looked, p.quiet, p.werr = false, false, nil
	p.rc.Read(p.step)
	quiet, err = p.looked && p.quiet, p.werr
	p.werr = nil
	return quiet, err
}

// sawPeer reports whether the last lookWrite looked at the socket and found
// something there (bytes, an end of stream or an error): the server spoke,
// or closed, while the connection was idle.
func (p *peeker) sawPeer() bool { return p.looked && !p.quiet }

func (p *peeker) lookThenWrite(fd uintptr) bool {
	if p.looked {
		return true // the wait ended
	}
	p.looked = true
	p.recv(fd)
	if !p.quiet {
		return true
	}
	if p.werr = p.write(); p.werr != nil {
		return true
	}
	return false // wait for the answer
}
