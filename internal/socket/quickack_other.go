//go:build !linux

package socket

// This file holds AckNow where the system does not let a program send an
// acknowledgement at once: it does nothing. No state, no lock.

// AckNow would send the socket's delayed acknowledgement at once. Only
// Linux lets a program ask for that (TCP_QUICKACK); elsewhere the ACK waits
// for the system's timer.
func (*Peeker) AckNow() {}
