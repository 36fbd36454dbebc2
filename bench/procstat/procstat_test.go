package procstat

import (
	"os"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	rss, err := parseRSS("Name:\tx\nVmPeak:\t  9000 kB\nVmRSS:\t   1234 kB\nRssAnon:\t 1 kB\n")
	if err != nil || rss != 1234<<10 {
		t.Errorf("parseRSS = %d, %v; want %d", rss, err, 1234<<10)
	}
	if _, err := parseRSS("Name:\tkthreadd\n"); err == nil {
		t.Error("parseRSS without VmRSS: no error")
	}
	// A name with a space and a parenthesis; utime 250, stime 50 ticks.
	stat := "42 (a b) c) S 7 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 5 1000 10"
	cpu, err := parseCPU(stat)
	if err != nil || cpu != 3*time.Second {
		t.Errorf("parseCPU = %v, %v; want 3s", cpu, err)
	}
	busy, total, err := parseMachine("cpu  100 20 30 400 50 6 4 0 7 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
	if err != nil || busy != 1600*time.Millisecond || total != 6100*time.Millisecond {
		t.Errorf("parseMachine = %v, %v, %v; want 1.6s busy of 6.1s", busy, total, err)
	}
	if _, _, err := parseMachine("cpu0 1 2 3 4 5 6 7 8\n"); err == nil {
		t.Error("parseMachine without the all-cores line: no error")
	}
	comm, ppid, err := parseParent(stat)
	if err != nil || comm != "a b) c" || ppid != 7 {
		t.Errorf("parseParent = %q, %d, %v; want \"a b) c\", 7", comm, ppid, err)
	}
}

func TestSelf(t *testing.T) {
	pid := os.Getpid()
	rss, err := RSS(pid)
	if err != nil || rss < 1<<20 {
		t.Errorf("RSS(self) = %d, %v; want at least 1 MiB", rss, err)
	}
	s, err := StartSampler(pid)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
	}
	cpu, _, err := s.Used()
	if err != nil || cpu < 100*time.Millisecond {
		t.Errorf("CPU used by a 300ms busy loop = %v, %v; want at least 100ms", cpu, err)
	}
	busy0, total0, err := Machine()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
	}
	busy1, total1, err := Machine()
	if err != nil || busy1-busy0 < 100*time.Millisecond || total1-total0 < busy1-busy0 {
		t.Errorf("machine CPU over a 300ms busy loop: %v busy of %v (%v); want at least 100ms busy, and no more than the total", busy1-busy0, total1-total0, err)
	}
}

func TestSettledAndCalm(t *testing.T) {
	pid := os.Getpid()
	rss, err := SettledAll([]int{pid, pid}, 20*time.Millisecond, 64<<20, 2, 20)
	if err != nil || len(rss) != 2 || rss[0] < 1<<20 || rss[1] < 1<<20 {
		t.Errorf("SettledAll(self twice) = %v, %v; want two RSS of at least 1 MiB", rss, err)
	}
	// This test's process is idle while it waits: its rate is steady.
	rate, ok, err := Calm([]int{pid}, 50*time.Millisecond, 0.2, 2, 20)
	if err != nil || !ok || rate > 0.5 {
		t.Errorf("Calm(self) = %.2f, %v, %v; want a steady rate below 0.5 cores", rate, ok, err)
	}
	// No two rates differ by less than nothing: never calm.
	if _, ok, err := Calm([]int{pid}, 10*time.Millisecond, 0, 1, 3); err != nil || ok {
		t.Errorf("Calm with zero tolerance = %v, %v; want not calm", ok, err)
	}
	if _, err := SettledAll([]int{pid, 1 << 30}, 10*time.Millisecond, 1, 1, 1); err == nil {
		t.Error("SettledAll with a process that does not exist: no error")
	}
}
