package logtree

import (
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Defaults chosen so that a node's whole recent history (a few minutes of
// normal operation) fits in a couple of MiB.
const (
	// DefaultMaxEntries is the default global cap on journal entries.
	DefaultMaxEntries = 8192
	// DefaultStreamBuffer is the default number of entries a stream buffers
	// before it starts dropping.
	DefaultStreamBuffer = 1024
)

// LogTree is a hierarchical, bounded, in-memory log journal. It is safe for
// concurrent use. The zero value is not usable; call New.
type LogTree struct {
	maxEntries   int
	maxPerDN     int
	streamBuffer int

	sinkMu sync.Mutex
	sink   io.Writer

	vmu       sync.RWMutex
	verbosity map[DN]int

	mu sync.Mutex
	// Global journal, oldest first. Every entry is also linked into the
	// list of its DN so that per-DN eviction and exact-DN reads don't scan
	// everything.
	head, tail *journalEntry
	count      int
	perDN      map[DN]*dnList
	readers    map[*Reader]struct{}
}

type journalEntry struct {
	entry        *Entry
	gprev, gnext *journalEntry // global list
	dprev, dnext *journalEntry // per-DN list
}

type dnList struct {
	head, tail *journalEntry
	count      int
}

// Option configures a LogTree.
type Option func(*LogTree)

// WithMaxEntries sets the global cap on kept entries (default
// DefaultMaxEntries). When the journal is full the oldest entry is dropped.
// Values below 1 are treated as 1.
func WithMaxEntries(n int) Option {
	return func(t *LogTree) { t.maxEntries = max(n, 1) }
}

// WithMaxEntriesPerDN additionally caps the entries kept for any single DN,
// so that a component logging in a loop cannot evict the history of all the
// others. 0 (the default) means only the global cap applies.
func WithMaxEntriesPerDN(n int) Option {
	return func(t *LogTree) { t.maxPerDN = max(n, 0) }
}

// WithStreamBuffer sets how many entries a stream (WithStream) buffers for a
// slow reader before dropping (default DefaultStreamBuffer).
func WithStreamBuffer(n int) Option {
	return func(t *LogTree) { t.streamBuffer = max(n, 1) }
}

// WithSink mirrors every entry, formatted by Entry.String, to w (typically
// os.Stderr, so that the journal of a crashed process is not lost). Writes
// to w are serialised; a slow w slows down loggers, an erroring w is
// ignored.
func WithSink(w io.Writer) Option {
	return func(t *LogTree) { t.sink = w }
}

// New returns an empty LogTree.
func New(opts ...Option) *LogTree {
	t := &LogTree{
		maxEntries:   DefaultMaxEntries,
		streamBuffer: DefaultStreamBuffer,
		verbosity:    make(map[DN]int),
		perDN:        make(map[DN]*dnList),
		readers:      make(map[*Reader]struct{}),
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

// LeveledFor returns a logger that writes entries under dn. Loggers are
// cheap; there is no need to cache them. dn must be valid (see
// DN.Validate): an invalid DN is a programming error and panics, like
// regexp.MustCompile with a bad pattern.
func (t *LogTree) LeveledFor(dn DN) LeveledLogger {
	if err := dn.Validate(); err != nil {
		panic(fmt.Sprintf("logtree: LeveledFor: %v", err))
	}
	return &leveledLogger{t: t, dn: dn}
}

// SetVerbosity sets the V level for dn and everything below it that has no
// more specific setting. V(n) is enabled when n <= level. The default level
// everywhere is 0, so V(0) is always enabled and V(1) and up are not.
func (t *LogTree) SetVerbosity(dn DN, level int) {
	t.vmu.Lock()
	defer t.vmu.Unlock()
	t.verbosity[dn] = level
}

// verbosityFor returns the level set on dn or its closest ancestor.
func (t *LogTree) verbosityFor(dn DN) int {
	t.vmu.RLock()
	defer t.vmu.RUnlock()
	for {
		if v, ok := t.verbosity[dn]; ok {
			return v
		}
		if dn == "" {
			return 0
		}
		dn = dn.Parent()
	}
}

// logDepth records a message written by the function depth frames above
// logDepth's caller (depth 1 = the caller of the caller of logDepth).
func (t *LogTree) logDepth(dn DN, sev Severity, depth int, msg string) {
	e := &Entry{DN: dn, Time: time.Now(), Severity: sev, Message: strings.TrimSuffix(msg, "\n")}
	if _, file, line, ok := runtime.Caller(depth + 1); ok {
		e.File = filepath.Base(file)
		e.Line = line
	}
	t.insert(e)
}

// insert appends e to the journal, evicts what no longer fits, hands e to
// matching streams and mirrors it to the sink.
func (t *LogTree) insert(e *Entry) {
	je := &journalEntry{entry: e}
	t.mu.Lock()
	// Global list.
	if t.tail == nil {
		t.head, t.tail = je, je
	} else {
		je.gprev = t.tail
		t.tail.gnext = je
		t.tail = je
	}
	t.count++
	// Per-DN list.
	l := t.perDN[e.DN]
	if l == nil {
		l = &dnList{}
		t.perDN[e.DN] = l
	}
	if l.tail == nil {
		l.head, l.tail = je, je
	} else {
		je.dprev = l.tail
		l.tail.dnext = je
		l.tail = je
	}
	l.count++
	if t.maxPerDN > 0 && l.count > t.maxPerDN {
		t.unlink(l.head)
	}
	for t.count > t.maxEntries {
		t.unlink(t.head)
	}
	for r := range t.readers {
		if r.matches(e) {
			select {
			case r.ch <- e:
			default:
				r.missed.Add(1)
			}
		}
	}
	t.mu.Unlock()

	if t.sink != nil {
		t.sinkMu.Lock()
		_, _ = io.WriteString(t.sink, e.String()+"\n")
		t.sinkMu.Unlock()
	}
}

// unlink removes je from both lists. t.mu must be held.
func (t *LogTree) unlink(je *journalEntry) {
	if je.gprev != nil {
		je.gprev.gnext = je.gnext
	} else {
		t.head = je.gnext
	}
	if je.gnext != nil {
		je.gnext.gprev = je.gprev
	} else {
		t.tail = je.gprev
	}
	t.count--
	l := t.perDN[je.entry.DN]
	if je.dprev != nil {
		je.dprev.dnext = je.dnext
	} else {
		l.head = je.dnext
	}
	if je.dnext != nil {
		je.dnext.dprev = je.dprev
	} else {
		l.tail = je.dprev
	}
	l.count--
	if l.count == 0 {
		delete(t.perDN, je.entry.DN)
	}
	*je = journalEntry{}
}
