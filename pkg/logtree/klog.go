package logtree

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxKLogLine bounds the bytes buffered for one line: a child writing
// megabytes without a newline must not grow our memory without limit. A
// longer line is cut and logged in pieces.
const maxKLogLine = 64 << 10

// klogHeader matches klog's line header:
//
//	Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg
var klogHeader = regexp.MustCompile(`^([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6})\s+(\d+)\s+([^\s:\]]+):(\d+)\] ?(.*)$`)

// logfmtLevel finds the level of a logrus/logfmt line, as containerd writes
// them: time="..." level=warning msg="...".
var logfmtLevel = regexp.MustCompile(`^time="[^"]*" level=([a-z]+) `)

// logfmtSeverity maps the level of a logfmt line to a severity, so that a
// containerd warning stays a warning; other lines are INFO.
func logfmtSeverity(s string) Severity {
	m := logfmtLevel.FindStringSubmatch(s)
	if m == nil {
		return INFO
	}
	switch m[1] {
	case "warn", "warning":
		return WARNING
	case "error":
		return ERROR
	case "fatal", "panic":
		return FATAL
	}
	return INFO
}

// KLogParser returns a writer for the stderr of a child process that logs
// with klog (kubelet, containerd's klog-using plugins, ...). Each complete
// line becomes an entry of l: klog lines keep their severity, time,
// file:line and message; any other non-empty line becomes a raw entry,
// INFO unless it is a logfmt line (time="..." level=... as written by
// containerd and other logrus users) whose level says otherwise.
// Partial lines are kept until their newline arrives or the writer is
// closed. Close flushes a pending partial line; writes after Close fail.
//
// l should come from LogTree.LeveledFor; with any other LeveledLogger the
// parsed severity is kept (FATAL as Error) but file:line is folded into the
// message and the time is the time of logging.
func KLogParser(l LeveledLogger) io.WriteCloser {
	return &klogParser{l: l, now: time.Now}
}

type klogParser struct {
	l   LeveledLogger
	now func() time.Time

	mu     sync.Mutex
	buf    []byte
	closed bool
}

func (p *klogParser) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, errors.New("klog parser: write after close")
	}
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		switch {
		case i > maxKLogLine || (i < 0 && len(p.buf) >= maxKLogLine):
			p.line(string(p.buf[:maxKLogLine]))
			p.buf = p.buf[maxKLogLine:]
			continue
		case i >= 0:
			p.line(string(p.buf[:i]))
			p.buf = p.buf[i+1:]
			continue
		}
		break
	}
	// Move the remainder to the front so the backing array does not grow
	// forever under a steady stream of writes.
	if len(p.buf) == 0 {
		p.buf = p.buf[:0:0]
	} else if cap(p.buf) > 2*maxKLogLine {
		p.buf = append([]byte(nil), p.buf...)
	}
	return len(b), nil
}

func (p *klogParser) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if len(p.buf) > 0 {
		p.line(string(p.buf))
		p.buf = nil
	}
	return nil
}

func (p *klogParser) line(s string) {
	s = strings.TrimRight(s, "\r")
	if strings.TrimSpace(s) == "" {
		return
	}
	e, ok := parseKLogLine(s, p.now())
	if !ok {
		e = &Entry{Time: p.now(), Severity: logfmtSeverity(s), Message: s}
	}
	if rl, ok := p.l.(rawLogger); ok {
		rl.logRaw(e)
		return
	}
	msg := e.Message
	if e.File != "" {
		msg = e.File + ":" + strconv.Itoa(e.Line) + "] " + msg
	}
	switch e.Severity {
	case INFO:
		p.l.Info(msg)
	case WARNING:
		p.l.Warning(msg)
	default:
		p.l.Error(msg)
	}
}

// parseKLogLine parses one klog line. klog omits the year; it is taken from
// now, and a date that would lie more than a day in the future is moved to
// the previous year (a line written on Dec 31 read on Jan 1).
func parseKLogLine(s string, now time.Time) (*Entry, bool) {
	m := klogHeader.FindStringSubmatch(s)
	if m == nil {
		return nil, false
	}
	sev, _ := severityFromLetter(m[1][0])
	num := func(i int) int { n, _ := strconv.Atoi(m[i]); return n }
	month, day, hour, minute, sec, usec := num(2), num(3), num(4), num(5), num(6), num(7)
	if month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || sec > 60 {
		return nil, false
	}
	line, err := strconv.Atoi(m[10])
	if err != nil {
		return nil, false
	}
	t := time.Date(now.Year(), time.Month(month), day, hour, minute, sec, usec*1000, now.Location())
	if t.After(now.Add(24 * time.Hour)) {
		t = t.AddDate(-1, 0, 0)
	}
	return &Entry{Time: t, Severity: sev, File: m[9], Line: line, Message: m[11]}, true
}
