// Package socket looks at and acts on a connection's socket beneath its
// net.Conn: whether it holds anything to read (a recv with MSG_PEEK and
// MSG_DONTWAIT), a read of what it holds already without waiting, a write
// made only while it is quiet, and an acknowledgement sent at once
// (TCP_QUICKACK). Where the system offers none of that, NewPeeker returns
// nil and its callers go through the connection as usual.
//
// A Peeker is owned by one goroutine at a time (its connection's read
// turn); it has no lock of its own.
package socket
