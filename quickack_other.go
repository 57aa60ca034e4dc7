//go:build !linux

package pipelined

// ackNow would send the socket's delayed acknowledgement at once. Only
// Linux lets a program ask for that (TCP_QUICKACK); elsewhere the ACK waits
// for the system's timer.
func (*peeker) ackNow() {}
