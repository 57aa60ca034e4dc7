package model

// This file holds the depth fallback after pipeline failures and the proof
// that a host handles pipelining. Its state (Host.failures, fallbackUntil,
// proven) is a Host's, guarded by hostPool.mu.

// The depth fallback. A host whose connections fail with pipelined requests
// outstanding (malformed responses, closes or resets mid-pipeline)
// fallbackAfter times within VerdictFor, or once while it is not proven to
// handle pipelining since its last fallback (a server that drops what is
// pipelined: gunicorn's gthread worker leaves the requests that came in the
// same read as the one it responds to without a response until it closes the
// connection, seconds later), or once a pipelined request had waited past
// the head-of-line timeout and then the connection closed (no server closes
// on a request it runs), is at depth 1 for VerdictFor.
// Such a server costs one stall per VerdictFor: the probe that finds it out
// again.

// NoteFailure records a pipeline failure: headSlow, its oldest request,
// pipelined, had waited past the head-of-line timeout.
func (m *Host) NoteFailure(headSlow bool) {
	now := m.Now()
	if now.Before(m.fallbackUntil) {
		return // pipelined before the fallback began
	}
	if !m.proven || headSlow {
		m.fallBack()
		return
	}
	// Keep the times of the last fallbackAfter failures.
	m.failures = append(m.failures, now)
	if len(m.failures) > fallbackAfter {
		m.failures = m.failures[len(m.failures)-fallbackAfter:]
	}
	if len(m.failures) == fallbackAfter && now.Sub(m.failures[0]) <= VerdictFor {
		m.fallBack()
	}
}

// fallBack puts the host at depth 1 from now for VerdictFor; it is not
// proven after.
func (m *Host) fallBack() {
	m.fallbackUntil = m.Now().Add(VerdictFor)
	m.proven, m.probeCopied = false, false
	m.failures = m.failures[:0]
}

// NoteStalledProbe records a probe left unread at the head of its
// connection past its wait, which has not proven the host: a host not
// proven, and not in fallback already, falls back (a server that drops what
// is pipelined).
func (m *Host) NoteStalledProbe() {
	if !m.proven && !m.InFallback() {
		m.fallBack()
	}
}

// NoteProven records that a request written together with the one ahead
// was responded to unprompted (the transport's attempt.proves): the host
// handles pipelining, until its next fallback.
func (m *Host) NoteProven() { m.proven = true }

// Proven reports whether the host is proven to handle pipelining since the
// model began or its last fallback; until then, one request at a time is
// pipelined, behind a head (the probe).
func (m *Host) Proven() bool { return m.proven }

// InFallback reports whether the host is in a depth fallback.
func (m *Host) InFallback() bool {
	return !m.fallbackUntil.IsZero() && m.Now().Before(m.fallbackUntil)
}

// Learned reports whether the model holds something about its host that a
// new one would have to learn again at a cost to requests: a
// per-connection budget, recent pipeline failures or a depth fallback, or
// evidence of a serial server.
func (m *Host) Learned() bool {
	return m.budget.learned() || len(m.failures) > 0 || m.InFallback() || m.Serial() ||
		m.order.score.n > 0 && m.order.score.v >= scoreOff
}
