package logtree

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
)

// BacklogAll asks WithBacklog for every kept entry.
const BacklogAll = -1

type readOptions struct {
	children bool
	backlog  int // 0: none
	stream   bool
	minSev   Severity
}

// ReadOption configures LogTree.Read.
type ReadOption func(*readOptions)

// WithChildren includes entries of every DN below the read DN, not only of
// the DN itself.
func WithChildren() ReadOption { return func(o *readOptions) { o.children = true } }

// WithBacklog returns up to the n most recent kept entries (BacklogAll for
// all of them) in Reader.Backlog, oldest first.
func WithBacklog(n int) ReadOption { return func(o *readOptions) { o.backlog = n } }

// WithStream delivers entries written after Read returns on Reader.Stream.
// The reader must be closed when no longer needed.
func WithStream() ReadOption { return func(o *readOptions) { o.stream = true } }

// OnlyAtLeast restricts backlog and stream to entries of severity sev or
// more important.
func OnlyAtLeast(sev Severity) ReadOption { return func(o *readOptions) { o.minSev = sev } }

// Reader is the result of LogTree.Read. Backlog and stream do not overlap
// and have no gap: every matching entry written after the backlog snapshot
// goes to the stream (or is counted by Missed).
type Reader struct {
	// Backlog holds the requested historic entries, oldest first.
	Backlog []*Entry
	// Stream receives new entries when WithStream was given (nil
	// otherwise). It is closed by Close.
	Stream <-chan *Entry

	t        *LogTree
	ch       chan *Entry
	dn       DN
	children bool
	minSev   Severity
	missed   atomic.Uint64
	closed   bool // guarded by t.mu
}

// Read returns the entries of dn (and its descendants WithChildren). At
// least one of WithBacklog and WithStream must be given.
func (t *LogTree) Read(dn DN, opts ...ReadOption) (*Reader, error) {
	if err := dn.Validate(); err != nil {
		return nil, fmt.Errorf("reading logs: %w", err)
	}
	var o readOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.backlog == 0 && !o.stream {
		return nil, errors.New("reading logs: nothing requested, pass WithBacklog and/or WithStream")
	}
	if o.backlog < BacklogAll {
		return nil, fmt.Errorf("reading logs: invalid backlog size %d", o.backlog)
	}
	r := &Reader{t: t, dn: dn, children: o.children, minSev: o.minSev}

	t.mu.Lock()
	defer t.mu.Unlock()
	if o.backlog != 0 {
		r.Backlog = t.backlogLocked(r, o.backlog)
	}
	if o.stream {
		r.ch = make(chan *Entry, t.streamBuffer)
		r.Stream = r.ch
		t.readers[r] = struct{}{}
	}
	return r, nil
}

// backlogLocked collects the newest n (or all) entries matching r, walking
// backwards from the newest.
func (t *LogTree) backlogLocked(r *Reader, n int) []*Entry {
	var out []*Entry
	take := func(e *Entry) bool {
		if r.matches(e) {
			out = append(out, e)
		}
		return n == BacklogAll || len(out) < n
	}
	if r.children {
		for je := t.tail; je != nil && take(je.entry); je = je.gprev {
		}
	} else if l := t.perDN[r.dn]; l != nil {
		for je := l.tail; je != nil && take(je.entry); je = je.dprev {
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func (r *Reader) matches(e *Entry) bool {
	if e.Severity < r.minSev {
		return false
	}
	if r.children {
		return e.DN.IsWithin(r.dn)
	}
	return e.DN == r.dn
}

// Missed returns how many stream entries were dropped because the stream's
// buffer was full.
func (r *Reader) Missed() uint64 { return r.missed.Load() }

// Close stops the stream and closes Reader.Stream. It is safe to call more
// than once and on readers without a stream.
func (r *Reader) Close() {
	if r.ch == nil {
		return
	}
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	delete(r.t.readers, r)
	close(r.ch)
}

// Text returns every entry logged so far at dn and below it, one per
// line, oldest first: what a test reads to see that something was said.
func (t *LogTree) Text(dn DN) (string, error) {
	r, err := t.Read(dn, WithChildren(), WithBacklog(BacklogAll))
	if err != nil {
		return "", fmt.Errorf("reading the log of %s: %w", dn, err)
	}
	defer r.Close()
	var b strings.Builder
	for _, e := range r.Backlog {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String(), nil
}
