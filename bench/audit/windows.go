package main

import (
	"time"
)

// window is when the audit walked the node's filesystem volumes once, as
// this host saw it in plinth-node's metrics: the operation histogram's
// "audit" observations (one per volume walked) grew between two scrapes,
// by dur seconds in all. The walk ended between prev (the scrape before)
// and at, and lasted dur, so it ran within [prev-dur, at]: the window is
// that, as wide as one scrape interval more than the walk itself.
type window struct {
	start, end time.Time
	// walks is the number of volumes walked; dur their time in all.
	walks int
	dur   time.Duration
}

// newWindow is the window of walks that ended between two scrapes taken
// at prev and at, and lasted dur in all.
func newWindow(prev, at time.Time, walks int, dur time.Duration) window {
	return window{start: prev.Add(-dur), end: at, walks: walks, dur: dur}
}

// span is one fio run as this host saw it: from the pod's creation to the
// moment its end was observed. fio ran inside it.
type span struct{ start, end time.Time }

// class is how a run stands to the audit's walks.
type class int

const (
	// unresolved: no walk overlaps the run so far, but none is known to
	// have started after it either, so one may still be running.
	unresolved class = iota
	// baseline: no walk ran within margin of the run.
	baseline
	// walking: the run lay entirely within a walk of the big volume.
	walking
	// mixed: a walk started or ended during the run; not counted.
	mixed
)

// classify says how run s stands to the walks ws (in the order they
// ended, which is the order they ran: the audit walks one volume at a
// time). A run counts as walking only within a window that started at or
// after full, when the big volume had all its files, so that every
// walking run saw a walk of the whole volume. A run is baseline only once
// a window is known to start after it (the walks run one after another,
// so every walk that could overlap it has then ended and is in ws), and
// none comes within margin of it: the audit's round goes on after the
// last volume's walk (it then searches outside every volume, which the
// metrics do not time), and the node takes a moment to settle. A run
// after the last window known is baseline too if it ended, with margin,
// before that window's start plus interval: the audit's rounds start on a
// ticker of that period, which drops ticks but never fires early, so the
// next walk cannot start sooner (a window's start is at or before its
// walk's, so the bound errs early).
func classify(s span, ws []window, full time.Time, margin, interval time.Duration) class {
	later := false
	for i, w := range ws {
		if i == len(ws)-1 && s.end.Add(margin).Before(w.start.Add(interval)) && w.end.Before(s.start.Add(-margin)) {
			later = true
		}
		if !w.start.After(s.start) && !w.end.Before(s.end) {
			if w.start.Before(full) {
				return mixed
			}
			return walking
		}
		if w.start.Before(s.end.Add(margin)) && w.end.After(s.start.Add(-margin)) {
			return mixed
		}
		if w.start.After(s.end) {
			later = true
		}
	}
	if later {
		return baseline
	}
	return unresolved
}
