package logtree

import "fmt"

// LeveledLogger is the logging interface handed to components. Its method
// set mirrors klog/glog so that code and habits carry over; there is no
// Fatal, because ending the process is the caller's decision, not a side
// effect of logging.
//
// The File and Line of each entry point at the code that called the method.
type LeveledLogger interface {
	// Info logs at INFO; arguments are formatted as by fmt.Sprint.
	Info(args ...any)
	// Infof logs at INFO; arguments are formatted as by fmt.Sprintf.
	Infof(format string, args ...any)
	Warning(args ...any)
	Warningf(format string, args ...any)
	Error(args ...any)
	Errorf(format string, args ...any)
	// V returns a logger for debug output at the given verbosity. It logs
	// INFO entries only if level <= the verbosity configured for this DN
	// (LogTree.SetVerbosity).
	V(level int) VerboseLeveledLogger
}

// VerboseLeveledLogger logs INFO entries if its verbosity level is enabled
// and does nothing otherwise. Check Enabled before building expensive
// messages.
type VerboseLeveledLogger interface {
	Enabled() bool
	Info(args ...any)
	Infof(format string, args ...any)
}

// rawLogger is implemented by the tree's own loggers so that KLogParser can
// insert entries with a foreign time, severity and source location.
type rawLogger interface {
	logRaw(e *Entry)
}

type leveledLogger struct {
	t  *LogTree
	dn DN
}

// Each method calls logDepth directly so that depth 1 is the user's frame.

func (l *leveledLogger) Info(args ...any) { l.t.logDepth(l.dn, INFO, 1, fmt.Sprint(args...)) }
func (l *leveledLogger) Infof(format string, args ...any) {
	l.t.logDepth(l.dn, INFO, 1, fmt.Sprintf(format, args...))
}
func (l *leveledLogger) Warning(args ...any) { l.t.logDepth(l.dn, WARNING, 1, fmt.Sprint(args...)) }
func (l *leveledLogger) Warningf(format string, args ...any) {
	l.t.logDepth(l.dn, WARNING, 1, fmt.Sprintf(format, args...))
}
func (l *leveledLogger) Error(args ...any) { l.t.logDepth(l.dn, ERROR, 1, fmt.Sprint(args...)) }
func (l *leveledLogger) Errorf(format string, args ...any) {
	l.t.logDepth(l.dn, ERROR, 1, fmt.Sprintf(format, args...))
}

func (l *leveledLogger) V(level int) VerboseLeveledLogger {
	return &verboseLogger{l: l, enabled: level <= l.t.verbosityFor(l.dn)}
}

func (l *leveledLogger) logRaw(e *Entry) {
	e.DN = l.dn
	l.t.insert(e)
}

type verboseLogger struct {
	l       *leveledLogger
	enabled bool
}

func (v *verboseLogger) Enabled() bool { return v.enabled }

func (v *verboseLogger) Info(args ...any) {
	if v.enabled {
		v.l.t.logDepth(v.l.dn, INFO, 1, fmt.Sprint(args...))
	}
}

func (v *verboseLogger) Infof(format string, args ...any) {
	if v.enabled {
		v.l.t.logDepth(v.l.dn, INFO, 1, fmt.Sprintf(format, args...))
	}
}
