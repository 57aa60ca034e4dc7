//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package pipelined

import (
	"crypto/tls"
	"net"
	"syscall"
)

// canPeek reports whether socketQuiet can look at conn without reading
// from it: a TCP connection of the operating system's, or a connection
// that exposes its socket (syscall.Conn), as a thin wrapper that counts or
// traces does by promising that it buffers nothing. A TLS connection, or
// any other wrapper, may hold bytes of its own (a record, a proxy's
// buffer), so it is never looked at this way.
func canPeek(conn net.Conn) bool {
	if tc, ok := conn.(*tls.Conn); ok {
		// TLS over a socket: the records the TLS connection already
		// holds are looked at through it (pconn.quiet), the socket so.
		conn = tc.NetConn()
	}
	_, ok := conn.(syscall.Conn)
	return ok
}

// socketQuiet reports whether conn has nothing to read, neither bytes nor
// an end of stream nor an error, without reading or waiting: a recv with
// MSG_PEEK and MSG_DONTWAIT that finds nothing (EAGAIN).
func socketQuiet(conn net.Conn) bool {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	quiet := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		quiet = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait
	})
	return err == nil && quiet
}
