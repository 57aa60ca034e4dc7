package pipelined

// This file holds the policies that choose a connection for a request. Each
// is a small type that looks only at the scheduling fields of the
// connections it is given (guarded by hostPool.mu, which the caller holds),
// costs O(connections) and allocates nothing.

// leastWait chooses the connection with the least expected wait.
//
//   - idle: an idle connection beats any queue (join-idle-queue); among
//     idle ones, the most recently used, which is the least likely to have
//     been closed by the server meanwhile.
//   - pipeline: among connections that may take one more request, the one
//     with the fewest requests in flight; ties go to the one whose oldest
//     request became the head most recently (a head that has been
//     outstanding long is likely to stay so), then round robin.
type leastWait struct {
	next uint // rotates the scan's starting point so that ties are shared
}

// idle returns the most recently used idle connection, or nil.
func (leastWait) idle(conns []*pconn) *pconn {
	var best *pconn
	for _, c := range conns {
		if c.inflight != 0 || c.closing {
			continue
		}
		if best == nil || c.idleSince.After(best.idleSince) {
			best = c
		}
	}
	return best
}

// pipeline returns the eligible busy connection with the least expected
// wait, or nil. Not eligible: closing, at depth, holding a request that
// nothing may follow, streaming a large head body, or kept to drain for a
// request that needs an empty connection.
func (lw *leastWait) pipeline(conns []*pconn, depth int) *pconn {
	n := uint(len(conns))
	if n == 0 {
		return nil
	}
	start := lw.next % n
	lw.next++
	var best *pconn
	for i := uint(0); i < n; i++ {
		j := start + i
		if j >= n {
			j -= n
		}
		c := conns[j]
		if c.closing || c.exclusive || c.large || c.slow || c.reserved || c.inflight >= depth {
			continue
		}
		if best == nil || c.inflight < best.inflight ||
			(c.inflight == best.inflight && c.headTick > best.headTick) {
			best = c
		}
	}
	return best
}

// drainCandidate returns the busy connection that will be empty soonest,
// to be kept free of new requests for one that needs an empty connection.
func (leastWait) drainCandidate(conns []*pconn) *pconn {
	var best *pconn
	for _, c := range conns {
		if c.closing || c.reserved || c.large {
			continue
		}
		if best == nil || c.inflight < best.inflight {
			best = c
		}
	}
	return best
}
