package volume

import "sync"

// changes wakes those waiting for the Manager's next change of the data
// filesystem. It is a broadcast without a history: each wait gets the
// channel of the next change, and all waiters of that change share it.
// The zero value is ready to use.
type changes struct {
	mu   sync.Mutex
	next chan struct{}
}

// wait returns a channel that is closed at the next signal.
func (c *changes) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next == nil {
		c.next = make(chan struct{})
	}
	return c.next
}

// signal closes the channel of the waiters so far; later waiters wait for
// the signal after it.
func (c *changes) signal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next != nil {
		close(c.next)
		c.next = nil
	}
}

// Changed returns a channel that is closed once an operation that may have
// changed what the data filesystem holds (Create, Expand, Delete, Recover,
// a SetReclaimPolicy that wrote) has returned, whether it succeeded or not.
// Its work is visible to Space by then. A caller that follows every change
// takes a new channel each time it is woken, before it measures, so that a
// change during its measurement wakes it again.
//
// It exists because the space a volume takes is not all written when the
// volume's consumer learns of it: the reclaim policy record, for one, is
// written after the volume is made, and again once the PV exists, and the
// space it takes would otherwise go unnoticed until something else
// changed.
func (m *Manager) Changed() <-chan struct{} { return m.changes.wait() }
