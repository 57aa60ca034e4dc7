//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package socket

import "net"

// This file holds the Peeker of the systems without MSG_PEEK and
// MSG_DONTWAIT: one that is never made. It has no state and no lock.

// A Peeker would look at a socket without reading it. Here there is no
// way to, so NewPeeker returns nil: a connection's reader goroutine always
// watches it, and callers never read their own responses.
type Peeker struct{ Write func() error }

// NewPeeker returns nil: here a socket cannot be looked at.
func NewPeeker(net.Conn) *Peeker { return nil }

// SocketQuiet reports false: the socket cannot be looked at.
func (*Peeker) SocketQuiet() bool { return false }

// LookWrite writes nothing and reports that it did not look.
func (*Peeker) LookWrite() (bool, error) { return false, nil }

// SawPeer reports false: nothing was looked at.
func (*Peeker) SawPeer() bool { return false }

// ReadNow reads nothing.
func (*Peeker) ReadNow([]byte) int { return 0 }
