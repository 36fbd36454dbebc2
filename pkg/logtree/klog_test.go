package logtree

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

func TestKLogParser(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		sev        Severity
		file       string
		lineNo     int
		msg        string
	}{
		{"info", "I1122 08:15:02.123456   1234 file.go:42] hello world", INFO, "file.go", 42, "hello world"},
		{"warning", "W0102 23:59:59.000001 7 server.go:1] careful", WARNING, "server.go", 1, "careful"},
		{"error", "E1122 08:15:02.123456   1234 a_b-c.go:9999] boom: x] y", ERROR, "a_b-c.go", 9999, "boom: x] y"},
		{"fatal", "F1122 08:15:02.123456 1 main.go:3] dying", FATAL, "main.go", 3, "dying"},
		{"empty message", "I1122 08:15:02.123456 1 main.go:3]", INFO, "main.go", 3, ""},
		{"structured", `I1122 08:15:02.123456 1 kubelet.go:5] "Started" pod="x"`, INFO, "kubelet.go", 5, `"Started" pod="x"`},
		{"crlf", "W1122 08:15:02.123456 1 main.go:3] dos\r", WARNING, "main.go", 3, "dos"},
		{"logfmt warning", `time="2026-11-22T08:15:02Z" level=warning msg="slow"`, WARNING, "", 0, `time="2026-11-22T08:15:02Z" level=warning msg="slow"`},
		{"logfmt error", `time="2026-11-22T08:15:02Z" level=error msg="bad"`, ERROR, "", 0, `time="2026-11-22T08:15:02Z" level=error msg="bad"`},
		{"logfmt info", `time="2026-11-22T08:15:02Z" level=info msg="ok"`, INFO, "", 0, `time="2026-11-22T08:15:02Z" level=info msg="ok"`},
		{"garbage", "panic: something broke", INFO, "", 0, "panic: something broke"},
		{"bad severity", "X1122 08:15:02.123456 1 main.go:3] no", INFO, "", 0, "X1122 08:15:02.123456 1 main.go:3] no"},
		{"bad month", "I1322 08:15:02.123456 1 main.go:3] no", INFO, "", 0, "I1322 08:15:02.123456 1 main.go:3] no"},
		{"short micros", "I1122 08:15:02.1234 1 main.go:3] no", INFO, "", 0, "I1122 08:15:02.1234 1 main.go:3] no"},
		{"no line number", "I1122 08:15:02.123456 1 main.go] no", INFO, "", 0, "I1122 08:15:02.123456 1 main.go] no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := New()
			p := KLogParser(lt.LeveledFor("child"))
			if _, err := io.WriteString(p, tc.line+"\n"); err != nil {
				t.Fatal(err)
			}
			r := mustRead(t, lt, "child", WithBacklog(BacklogAll))
			if len(r.Backlog) != 1 {
				t.Fatalf("got %d entries, want 1", len(r.Backlog))
			}
			e := r.Backlog[0]
			if e.Severity != tc.sev || e.File != tc.file || e.Line != tc.lineNo || e.Message != tc.msg || e.DN != "child" {
				t.Errorf("got %v %s %s:%d %q, want %v child %s:%d %q", e.Severity, e.DN, e.File, e.Line, e.Message, tc.sev, tc.file, tc.lineNo, tc.msg)
			}
		})
	}
}

func TestKLogParserTime(t *testing.T) {
	now := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	e, ok := parseKLogLine("I1122 08:15:02.123456 1 f.go:1] m", now)
	if !ok {
		t.Fatal("not parsed")
	}
	if want := time.Date(2026, 11, 22, 8, 15, 2, 123456000, time.UTC); !e.Time.Equal(want) {
		t.Errorf("time %v, want %v", e.Time, want)
	}
	// A line from Dec 31 read on Jan 1 belongs to the previous year.
	e, _ = parseKLogLine("I1231 23:59:59.000000 1 f.go:1] m", time.Date(2027, 1, 1, 0, 0, 1, 0, time.UTC))
	if e.Time.Year() != 2026 {
		t.Errorf("year rollover: got %v", e.Time)
	}
}

func TestKLogParserPartialWrites(t *testing.T) {
	lt := New()
	p := KLogParser(lt.LeveledFor("child"))
	input := "I1122 08:15:02.123456   1 a.go:1] first\n\n   \ngarbage line\r\nE1122 08:15:02.123456 1 b.go:2] second\nW1122 08:15:02.123456 1 c.go:3] unterminated"
	for i := range len(input) { // one byte at a time
		if n, err := p.Write([]byte{input[i]}); n != 1 || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	r := mustRead(t, lt, "child", WithBacklog(BacklogAll))
	if got := strings.Join(messages(r.Backlog), "|"); got != "child:first|child:garbage line|child:second" {
		t.Errorf("before Close: %q (the unterminated line must wait)", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	r = mustRead(t, lt, "child", WithBacklog(1))
	if e := r.Backlog[0]; e.Message != "unterminated" || e.Severity != WARNING || e.File != "c.go" {
		t.Errorf("Close did not flush the partial line: %+v", e)
	}
	if _, err := p.Write([]byte("late\n")); err == nil {
		t.Error("Write after Close succeeded")
	}
}

func TestKLogParserLongLine(t *testing.T) {
	lt := New()
	p := KLogParser(lt.LeveledFor("child"))
	long := strings.Repeat("x", maxKLogLine+10)
	fmt.Fprintf(p, "%s\nafter\n", long)
	r := mustRead(t, lt, "child", WithBacklog(BacklogAll))
	var sizes []int
	for _, e := range r.Backlog {
		sizes = append(sizes, len(e.Message))
	}
	if fmt.Sprint(sizes) != fmt.Sprint([]int{maxKLogLine, 10, 5}) {
		t.Errorf("entry sizes %v, want [%d 10 5]", sizes, maxKLogLine)
	}
}

// foreignLogger is a LeveledLogger that is not one of the tree's own.
type foreignLogger struct{ got []string }

func (f *foreignLogger) Info(args ...any)                 { f.got = append(f.got, "I "+fmt.Sprint(args...)) }
func (f *foreignLogger) Infof(format string, args ...any) { f.Info(fmt.Sprintf(format, args...)) }
func (f *foreignLogger) Warning(args ...any)              { f.got = append(f.got, "W "+fmt.Sprint(args...)) }
func (f *foreignLogger) Warningf(format string, args ...any) {
	f.Warning(fmt.Sprintf(format, args...))
}
func (f *foreignLogger) Error(args ...any)                 { f.got = append(f.got, "E "+fmt.Sprint(args...)) }
func (f *foreignLogger) Errorf(format string, args ...any) { f.Error(fmt.Sprintf(format, args...)) }
func (f *foreignLogger) V(int) VerboseLeveledLogger        { return nil }

func TestKLogParserForeignLogger(t *testing.T) {
	f := &foreignLogger{}
	p := KLogParser(f)
	fmt.Fprint(p, "F1122 08:15:02.123456 1 main.go:3] dying\nraw\n")
	if got := strings.Join(f.got, "|"); got != "E main.go:3] dying|I raw" {
		t.Errorf("got %q", got)
	}
}
