//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package pipelined

import "net"

// A peeker would look at a socket without reading it. Here there is no
// way to, so newPeeker returns nil: a connection's reader goroutine always
// watches it, and callers never read their own answers (direct.go).
type peeker struct{ write func() error }

func newPeeker(net.Conn) *peeker { return nil }

func (*peeker) socketQuiet() bool { return false }

func (*peeker) lookWrite() (bool, error) { return false, nil }

func (*peeker) sawPeer() bool { return false }

func (*peeker) readNow([]byte) int { return 0 }
