package socket

import "syscall"

// This file holds AckNow where Linux offers TCP_QUICKACK. It uses the
// Peeker's socket and has no state of its own.

// AckNow sends the socket's delayed acknowledgement at once, if one is
// due, and leaves the socket's interactive ("pingpong") mode, in which
// Linux delays acknowledgements (TCP_QUICKACK, tcp(7)). The kernel enters
// that mode again when the connection sends soon after it receives, so it
// is asked for at each read that waits too long rather than once. An
// error changes nothing: the ACK goes out when the kernel's timer ends,
// as it would have.
func (p *Peeker) AckNow() { p.rc.Control(quickAck) }

func quickAck(fd uintptr) {
	syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
}
