package logtree

import (
	"bytes"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func messages(es []*Entry) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, string(e.DN)+":"+e.Message)
	}
	return out
}

func mustRead(t *testing.T, lt *LogTree, dn DN, opts ...ReadOption) *Reader {
	t.Helper()
	r, err := lt.Read(dn, opts...)
	if err != nil {
		t.Fatalf("Read(%q): %v", dn, err)
	}
	t.Cleanup(r.Close)
	return r
}

func TestDNValidate(t *testing.T) {
	for _, tc := range []struct {
		dn DN
		ok bool
	}{
		{"", true},
		{"root", true},
		{"root.kubernetes.csi", true},
		{"a-b.c_d.E9", true},
		{".root", false},
		{"root.", false},
		{"root..csi", false},
		{"root.c si", false},
		{"root/csi", false},
		{"röot", false},
	} {
		err := tc.dn.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("DN(%q).Validate() = %v, want ok=%v", tc.dn, err, tc.ok)
		}
	}
}

func TestDNRelations(t *testing.T) {
	if got := DN("").Child("root").Child("csi"); got != "root.csi" {
		t.Errorf("Child: got %q", got)
	}
	if got := DN("root.kubernetes.csi").Parent(); got != "root.kubernetes" {
		t.Errorf("Parent: got %q", got)
	}
	if got := DN("root").Parent(); got != "" {
		t.Errorf("Parent of top level: got %q", got)
	}
	for _, tc := range []struct {
		dn, anc DN
		want    bool
	}{
		{"a.b", "a", true},
		{"a", "a", true},
		{"a", "", true},
		{"ab", "a", false}, // a string prefix is not a path prefix
		{"a", "a.b", false},
	} {
		if got := tc.dn.IsWithin(tc.anc); got != tc.want {
			t.Errorf("%q.IsWithin(%q) = %v, want %v", tc.dn, tc.anc, got, tc.want)
		}
	}
}

func TestRoutingAndSubtreeReads(t *testing.T) {
	lt := New()
	lt.LeveledFor("a").Info("1")
	lt.LeveledFor("a.b").Info("2")
	lt.LeveledFor("ab").Info("3")
	lt.LeveledFor("a.b.c").Info("4")
	lt.LeveledFor("x").Info("5")
	lt.LeveledFor("a").Info("6")

	for _, tc := range []struct {
		dn   DN
		opts []ReadOption
		want string
	}{
		{"a", nil, "a:1 a:6"},
		{"a", []ReadOption{WithChildren()}, "a:1 a.b:2 a.b.c:4 a:6"},
		{"a.b", []ReadOption{WithChildren()}, "a.b:2 a.b.c:4"},
		{"a.b", nil, "a.b:2"},
		{"", []ReadOption{WithChildren()}, "a:1 a.b:2 ab:3 a.b.c:4 x:5 a:6"},
		{"", nil, ""},
		{"nope", []ReadOption{WithChildren()}, ""},
		{"a", []ReadOption{WithChildren(), WithBacklog(2)}, "a.b.c:4 a:6"},
	} {
		opts := append([]ReadOption{WithBacklog(BacklogAll)}, tc.opts...)
		r := mustRead(t, lt, tc.dn, opts...)
		if got := strings.Join(messages(r.Backlog), " "); got != tc.want {
			t.Errorf("Read(%q, %d opts) = %q, want %q", tc.dn, len(tc.opts), got, tc.want)
		}
	}
}

func TestReadErrors(t *testing.T) {
	lt := New()
	if _, err := lt.Read("a..b", WithBacklog(1)); err == nil {
		t.Error("Read with invalid DN succeeded")
	}
	if _, err := lt.Read("a"); err == nil {
		t.Error("Read without backlog or stream succeeded")
	}
	if _, err := lt.Read("a", WithBacklog(-2)); err == nil {
		t.Error("Read with negative backlog succeeded")
	}
}

func TestGlobalRingBound(t *testing.T) {
	lt := New(WithMaxEntries(10))
	for i := range 25 {
		lt.LeveledFor(DN(fmt.Sprintf("n%d", i%3))).Info(i)
	}
	r := mustRead(t, lt, "", WithChildren(), WithBacklog(BacklogAll))
	if len(r.Backlog) != 10 {
		t.Fatalf("kept %d entries, want 10", len(r.Backlog))
	}
	for i, e := range r.Backlog {
		if want := fmt.Sprint(15 + i); e.Message != want {
			t.Errorf("entry %d = %q, want %q (oldest must be dropped first)", i, e.Message, want)
		}
	}
	// The per-DN index must agree with the global list after evictions.
	r = mustRead(t, lt, "n0", WithBacklog(BacklogAll))
	if got := strings.Join(messages(r.Backlog), " "); got != "n0:15 n0:18 n0:21 n0:24" {
		t.Errorf("n0 after eviction: %q", got)
	}
}

func TestPerDNBound(t *testing.T) {
	lt := New(WithMaxEntries(100), WithMaxEntriesPerDN(3))
	lt.LeveledFor("quiet").Info("q1")
	for i := range 10 {
		lt.LeveledFor("noisy").Info(i)
	}
	lt.LeveledFor("quiet").Info("q2")
	r := mustRead(t, lt, "", WithChildren(), WithBacklog(BacklogAll))
	if got := strings.Join(messages(r.Backlog), " "); got != "quiet:q1 noisy:7 noisy:8 noisy:9 quiet:q2" {
		t.Errorf("got %q", got)
	}
}

func TestSeverityFilter(t *testing.T) {
	lt := New()
	l := lt.LeveledFor("a")
	l.Info("i")
	l.Warning("w")
	l.Error("e")
	r := mustRead(t, lt, "a", WithBacklog(BacklogAll), OnlyAtLeast(WARNING))
	if got := strings.Join(messages(r.Backlog), " "); got != "a:w a:e" {
		t.Errorf("got %q", got)
	}
	for _, e := range r.Backlog {
		if !e.Severity.AtLeast(WARNING) {
			t.Errorf("entry %q has severity %v", e.Message, e.Severity)
		}
	}
}

func TestStream(t *testing.T) {
	lt := New()
	lt.LeveledFor("a").Info("old")
	r := mustRead(t, lt, "a", WithChildren(), WithBacklog(BacklogAll), WithStream(), OnlyAtLeast(WARNING))
	if len(r.Backlog) != 0 {
		t.Errorf("backlog has an INFO entry despite OnlyAtLeast(WARNING): %v", messages(r.Backlog))
	}
	lt.LeveledFor("a.b").Warning("w1")
	lt.LeveledFor("a.b").Info("filtered")
	lt.LeveledFor("x").Error("elsewhere")
	lt.LeveledFor("a").Errorf("e%d", 2)
	for _, want := range []string{"a.b:w1", "a:e2"} {
		select {
		case e := <-r.Stream:
			if got := string(e.DN) + ":" + e.Message; got != want {
				t.Errorf("stream got %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("stream: no entry, want %q", want)
		}
	}
	select {
	case e := <-r.Stream:
		t.Errorf("unexpected stream entry %v", e)
	default:
	}
	r.Close()
	r.Close()
	if _, ok := <-r.Stream; ok {
		t.Error("stream not closed by Close")
	}
	lt.LeveledFor("a").Error("after close") // must neither panic nor block
}

func TestStreamDropsInsteadOfBlocking(t *testing.T) {
	lt := New(WithStreamBuffer(2))
	r := mustRead(t, lt, "a", WithStream())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 5 {
			lt.LeveledFor("a").Info(i)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("writer blocked on a full stream")
	}
	if got := r.Missed(); got != 3 {
		t.Errorf("Missed() = %d, want 3", got)
	}
	if e := <-r.Stream; e.Message != "0" {
		t.Errorf("first streamed entry %q, want 0", e.Message)
	}
}

func TestVerbosity(t *testing.T) {
	lt := New()
	lt.SetVerbosity("a", 2)
	lt.SetVerbosity("a.b.c", 0)
	for _, tc := range []struct {
		dn    DN
		level int
		want  bool
	}{
		{"x", 0, true},
		{"x", 1, false},
		{"a", 2, true},
		{"a", 3, false},
		{"a.b", 2, true}, // inherited from a
		{"a.b.c", 1, false},
		{"a.b.c.d", 1, false}, // inherited from a.b.c
		{"a.b.c.d", 0, true},
	} {
		v := lt.LeveledFor(tc.dn).V(tc.level)
		if v.Enabled() != tc.want {
			t.Errorf("%q V(%d).Enabled() = %v, want %v", tc.dn, tc.level, v.Enabled(), tc.want)
		}
		v.Infof("%s %d", tc.dn, tc.level)
		r := mustRead(t, lt, tc.dn, WithBacklog(1))
		logged := len(r.Backlog) == 1 && r.Backlog[0].Message == fmt.Sprintf("%s %d", tc.dn, tc.level)
		if logged != tc.want {
			t.Errorf("%q V(%d).Infof logged=%v, want %v", tc.dn, tc.level, logged, tc.want)
		}
	}
}

func TestCallerLocation(t *testing.T) {
	lt := New()
	l := lt.LeveledFor("a")
	here := func() int { _, _, line, _ := runtime.Caller(1); return line }
	calls := []struct {
		name string
		log  func() int
		sev  Severity
	}{
		{"Info", func() int { l.Info("x"); return here() }, INFO},
		{"Infof", func() int { l.Infof("x"); return here() }, INFO},
		{"Warning", func() int { l.Warning("x"); return here() }, WARNING},
		{"Warningf", func() int { l.Warningf("x"); return here() }, WARNING},
		{"Error", func() int { l.Error("x"); return here() }, ERROR},
		{"Errorf", func() int { l.Errorf("x"); return here() }, ERROR},
		{"V.Info", func() int { l.V(0).Info("x"); return here() }, INFO},
		{"V.Infof", func() int { l.V(0).Infof("x"); return here() }, INFO},
	}
	for _, c := range calls {
		line := c.log()
		r := mustRead(t, lt, "a", WithBacklog(1))
		e := r.Backlog[0]
		if e.File != "logtree_test.go" || e.Line != line || e.Severity != c.sev {
			t.Errorf("%s: logged at %s:%d %v, want logtree_test.go:%d %v", c.name, e.File, e.Line, e.Severity, line, c.sev)
		}
	}
}

func TestSinkFormat(t *testing.T) {
	var buf bytes.Buffer
	lt := New(WithSink(&buf))
	lt.LeveledFor("root.kubernetes.csi").Warning("hello")
	lt.LeveledFor("a").Error("line1\nline2\n")
	want := regexp.MustCompile(`^W\d{4} \d\d:\d\d:\d\d\.\d{6} root\.kubernetes\.csi logtree_test\.go:\d+\] hello
E\d{4} \d\d:\d\d:\d\d\.\d{6} a logtree_test\.go:\d+\] line1
E\d{4} \d\d:\d\d:\d\d\.\d{6} a logtree_test\.go:\d+\] line2
$`)
	if !want.MatchString(buf.String()) {
		t.Errorf("sink output:\n%s", buf.String())
	}
}

func TestEntryString(t *testing.T) {
	e := &Entry{DN: "root.x", Time: time.Date(2026, 11, 22, 8, 15, 2, 123456000, time.UTC), Severity: ERROR, File: "f.go", Line: 42, Message: "msg"}
	if got, want := e.String(), "E1122 08:15:02.123456 root.x f.go:42] msg"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// TestConcurrentUse is mostly for -race: writers, readers and closers at once.
func TestConcurrentUse(t *testing.T) {
	lt := New(WithMaxEntries(64), WithStreamBuffer(8))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			l := lt.LeveledFor(DN(fmt.Sprintf("w%d.sub", w)))
			for i := range 500 {
				l.Infof("%d", i)
				l.V(1).Info("hidden")
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for range 100 {
				r, err := lt.Read("", WithChildren(), WithBacklog(10), WithStream())
				if err != nil {
					t.Error(err)
					return
				}
				if len(r.Backlog) > 10 {
					t.Errorf("backlog of %d entries, asked for 10", len(r.Backlog))
				}
				r.Close()
			}
		})
	}
	wg.Go(func() {
		for i := range 100 {
			lt.SetVerbosity("w1", i%3)
		}
	})
	wg.Wait()
	r := mustRead(t, lt, "", WithChildren(), WithBacklog(BacklogAll))
	if len(r.Backlog) != 64 {
		t.Errorf("kept %d entries, want 64", len(r.Backlog))
	}
}

func BenchmarkInfo(b *testing.B) {
	lt := New()
	l := lt.LeveledFor("root.bench")
	for b.Loop() {
		l.Info("a message of typical length for a log line")
	}
}

func BenchmarkInfoWithStreams(b *testing.B) {
	lt := New()
	for range 4 {
		r, err := lt.Read("root", WithChildren(), WithStream())
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
	}
	l := lt.LeveledFor("root.bench")
	for b.Loop() {
		l.Info("a message of typical length for a log line")
	}
}

// TestText: a node's text holds its entries and its children's, oldest
// first, and nothing of a sibling whose name merely starts the same.
func TestText(t *testing.T) {
	lt := New()
	lt.LeveledFor("a").Info("first")
	lt.LeveledFor("ab").Info("sibling")
	lt.LeveledFor("a.b").Info("second")
	text, err := lt.Text("a")
	if err != nil {
		t.Fatal(err)
	}
	first, second := strings.Index(text, "first"), strings.Index(text, "second")
	if first < 0 || second < first || strings.Contains(text, "sibling") || strings.Count(text, "\n") != 2 {
		t.Errorf("Text(a) = %q, want the lines first and second, in order, and not sibling", text)
	}
}
