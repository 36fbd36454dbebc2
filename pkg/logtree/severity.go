package logtree

import "fmt"

// Severity is the importance of an entry. The four levels match klog's, so
// that logs of child processes using klog keep their meaning when parsed into
// the tree (see KLogParser).
type Severity int

// Severities in increasing order of importance.
const (
	INFO Severity = iota
	WARNING
	ERROR
	// FATAL only appears in entries parsed from other programs' output
	// (KLogParser): a LeveledLogger has no Fatal method because a library
	// must not end the process on its own.
	FATAL
)

// String returns the full upper-case name, e.g. "WARNING".
func (s Severity) String() string {
	switch s {
	case INFO:
		return "INFO"
	case WARNING:
		return "WARNING"
	case ERROR:
		return "ERROR"
	case FATAL:
		return "FATAL"
	}
	return fmt.Sprintf("Severity(%d)", int(s))
}

// Letter returns the one-letter klog abbreviation (I, W, E, F), or '?' for
// an unknown severity.
func (s Severity) Letter() byte {
	switch s {
	case INFO:
		return 'I'
	case WARNING:
		return 'W'
	case ERROR:
		return 'E'
	case FATAL:
		return 'F'
	}
	return '?'
}

// AtLeast reports whether s is as important as other or more.
func (s Severity) AtLeast(other Severity) bool { return s >= other }

func severityFromLetter(b byte) (Severity, bool) {
	switch b {
	case 'I':
		return INFO, true
	case 'W':
		return WARNING, true
	case 'E':
		return ERROR, true
	case 'F':
		return FATAL, true
	}
	return 0, false
}
