//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package pipelined

import "net"

// canPeek reports false: without a way to look at a socket without
// reading it, a connection's reader goroutine always watches it, and
// callers never read their own answers (direct.go).
func canPeek(net.Conn) bool { return false }

func socketQuiet(net.Conn) bool { return false }
