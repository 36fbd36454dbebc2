package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// line is one console line and when this host read it.
type line struct {
	at   time.Time
	text string
}

// console records the VM's console, every line with the host's time of
// reading it: the one clock every other time of a boot is brought onto
// (see timeline.go). It is the nodevm.Config.Console of the benchmark's
// node, which writes one line per Write. Each boot's lines also go to a
// file of the work directory, each prefixed with its host time, so that a
// failed run can be read afterwards.
type console struct {
	mu    sync.Mutex
	lines []line
	file  *os.File
}

func (c *console) Write(p []byte) (int, error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	text := strings.TrimSuffix(string(p), "\n")
	c.lines = append(c.lines, line{at: now, text: text})
	if c.file != nil {
		fmt.Fprintf(c.file, "%s %s\n", now.UTC().Format("15:04:05.000000"), text)
	}
	return len(p), nil
}

// startBoot forgets the lines of earlier boots and writes the next ones to
// path.
func (c *console) startBoot(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("console log: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
	c.lines, c.file = nil, f
	return nil
}

// snapshot is the current boot's lines so far.
func (c *console) snapshot() []line {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]line(nil), c.lines...)
}

func (c *console) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
}

func (c *console) closeLocked() {
	if c.file != nil {
		c.file.Close()
		c.file = nil
	}
}

var _ io.Writer = (*console)(nil)

// lockups are the console lines that report the guest kernel stuck (a
// soft or hard lockup, a task blocked for minutes, RCU stalls), with a
// few lines after each: what a boot that never finishes shows first.
func lockups(lines []line) []string {
	var out []string
	for i, l := range lines {
		if !strings.Contains(l.text, "soft lockup") && !strings.Contains(l.text, "hard LOCKUP") &&
			!strings.Contains(l.text, "blocked for more than") && !strings.Contains(l.text, "rcu_sched self-detected stall") &&
			!strings.Contains(l.text, "rcu: INFO") {
			continue
		}
		for j := i; j < len(lines) && j < i+4; j++ {
			out = append(out, lines[j].text)
		}
		if len(out) > 40 {
			break
		}
	}
	return out
}
