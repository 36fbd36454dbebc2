package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"source.plinth.dev/bench/fio"
	"source.plinth.dev/bench/scrape"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/test/images"
)

// bench is one run of the benchmark on a booted node.
type bench struct {
	w *world
	o options
	// fillTime is how long the fill pod took, creation to end; full is
	// when it ended, from which on a walk walks every file.
	fillTime time.Duration
	full     time.Time

	mu      sync.Mutex
	windows []window
	runs    []fioRun
}

// fioRun is one fio pod's run: when it ran and what it measured.
type fioRun struct {
	s span
	m map[string]fio.Measure
}

// margin keeps a baseline run this far from every walk (classify).
const margin = 10 * time.Second

// measure fills the big volume, then runs fio until there are o.runs
// runs inside a walk and as many clear of every walk.
func (b *bench) measure(ctx context.Context) error {
	c := b.w.cp.Client
	if err := createClaims(ctx, c, b.o.files); err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	watched := make(chan error, 1)
	go func() { watched <- b.watch(wctx) }()
	start := time.Now()
	if err := fill(ctx, c, b.o.files); err != nil {
		return fmt.Errorf("filling the big volume: %w", err)
	}
	b.full = time.Now()
	b.fillTime = b.full.Sub(start)
	fmt.Printf("audit: %d files made in %.1f s (%.0f files/s, pod start included)\n",
		b.o.files, b.fillTime.Seconds(), float64(b.o.files)/b.fillTime.Seconds())
	if _, _, err := runPod(ctx, c, pod{name: "fio-fill", claim: fioClaim, image: images.FioRef, args: fio.FillArgs(fioFile, fioSize)}); err != nil {
		return fmt.Errorf("writing fio's file: %w", err)
	}
	deadline := time.Now().Add(3*b.o.interval + 5*time.Minute)
	for i := 1; ; i++ {
		n := b.counts()
		if n[baseline] >= b.o.runs && n[walking] >= b.o.runs {
			break
		}
		select {
		case err := <-watched:
			return fmt.Errorf("reading the audit's walks: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %d fio runs, %d clear of every walk and %d inside one (%d mixed, %d unresolved), want %d each: walks seen %v",
				i-1, n[baseline], n[walking], n[mixed], n[unresolved], b.o.runs, b.walks())
		}
		out, s, err := runPod(ctx, c, pod{name: fmt.Sprintf("fio-%d", i), claim: fioClaim, image: images.FioRef, args: runArgs(b.o.runtime)})
		if err != nil {
			return fmt.Errorf("fio run %d: %w", i, err)
		}
		m, err := fio.Parse(out, jobs)
		if err != nil {
			return fmt.Errorf("fio run %d: %w", i, err)
		}
		b.mu.Lock()
		b.runs = append(b.runs, fioRun{s: s, m: m})
		b.mu.Unlock()
		r, w := m[jobs[0].Name], m[jobs[1].Name]
		fmt.Printf("audit: run %d (%.0f s after the fill): randread p99 %.0f µs %.0f IOPS, randwrite p99 %.0f µs %.0f IOPS\n",
			i, s.start.Sub(b.full).Seconds(), r.P99*1e6, r.IOPS, w.P99*1e6, w.IOPS)
	}
	return nil
}

// counts classifies every run so far.
func (b *bench) counts() map[class]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := map[class]int{}
	for _, r := range b.runs {
		n[classify(r.s, b.windows, b.full, margin, b.o.interval)]++
	}
	return n
}

// walks are the windows so far, for an error message.
func (b *bench) walks() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, w := range b.windows {
		out = append(out, fmt.Sprintf("%d walks %.1f s ending %.0f s after the fill", w.walks, w.dur.Seconds(), w.end.Sub(b.full).Seconds()))
	}
	return out
}

// watch scrapes plinth-node's metrics every second until ctx ends and
// records a window each time the audit's walk count grew. It fails after
// a minute without a scrape.
func (b *bench) watch(ctx context.Context) error {
	addr := b.w.node.MetricsAddress()
	var prev scrape.Totals
	var prevAt, lastOK time.Time
	lastOK = time.Now()
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := scrape.Endpoint(sctx, addr)
		cancel()
		at := time.Now()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if at.Sub(lastOK) > time.Minute {
				return err
			}
			fmt.Fprintf(os.Stderr, "audit: %v\n", err)
		default:
			lastOK = at
			t := s.Sum(metrics.Namespace+"_operation_duration_seconds", map[string]string{"operation": string(metrics.Audit)})
			if !prevAt.IsZero() && t.Count > prev.Count {
				d := t.Minus(prev)
				w := newWindow(prevAt, at, int(d.Count), time.Duration(d.Sum*float64(time.Second)))
				b.mu.Lock()
				b.windows = append(b.windows, w)
				b.mu.Unlock()
				fmt.Printf("audit: %d volumes walked in %.1f s, ending %.0f s after boot\n", w.walks, w.dur.Seconds(), at.Sub(b.w.booted).Seconds())
			}
			prev, prevAt = t, at
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}
