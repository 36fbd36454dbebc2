package logtree

import (
	"fmt"
	"strings"
	"time"
)

// Entry is one log message as stored in the tree. Entries are shared between
// readers and must be treated as read-only.
type Entry struct {
	// DN is the node that wrote the entry.
	DN DN
	// Time is when the entry was written (for parsed klog lines: the time
	// the line carries).
	Time time.Time
	// Severity is the entry's level; V() logging produces INFO entries.
	Severity Severity
	// File is the base name of the source file that logged, and Line the
	// line in it; empty/0 when unknown (e.g. raw lines of a child process).
	File string
	Line int
	// Message is the text, without a trailing newline. It may contain
	// newlines (e.g. a stack trace).
	Message string
}

// String formats the entry the way klog does, with the DN in place of the
// thread id, e.g.
//
//	I1122 08:15:02.123456 root.kubernetes.csi file.go:42] msg
//
// A multi-line message repeats the header on every line so that each line
// stays attributable when grepped.
func (e *Entry) String() string {
	dn := string(e.DN)
	if dn == "" {
		dn = "."
	}
	loc := "???:0"
	if e.File != "" {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	header := fmt.Sprintf("%c%s %s %s] ", e.Severity.Letter(), e.Time.Format("0102 15:04:05.000000"), dn, loc)
	lines := strings.Split(e.Message, "\n")
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(header)
		b.WriteString(l)
	}
	return b.String()
}
