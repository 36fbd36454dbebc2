package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// A boot's times come from four clocks: this host's (when qemu started
// and ended, when the API server showed the Node Ready and the plugin
// registered, when each console line arrived), the guest's time of day
// (plinth-node's log lines, the container runtime's timestamp of the
// probe's line), and the guest kernel's boot clock (init's start). All are
// brought onto the host's:
//
// (The printk timestamps of the kernel's own lines would be a fifth; the
// node boots with loglevel=5, so the console has too few of them.)
//
//   - the guest's time of day is off the host's by a constant per boot
//     (the guest reads it once from the emulated RTC, to the second).
//     Every log line of plinth-node on the console carries it and arrives
//     here a little later; the smallest (arrival - stamp) over a boot's
//     lines is that offset plus the quickest line's trip through the
//     serial console, at most a few milliseconds;
//   - the boot clock is tied to the time of day by init's line, which gives
//     both its start and the clock's reading when the line was stamped.

// logLine matches a line of plinth-node's log tree (pkg/logtree's klog
// form): severity, month and day, time of day to the microsecond, the
// runnable's DN and the source location, then the message.
var logLine = regexp.MustCompile(`^[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) \S+ \S+\] (.*)$`)

// initLine is init's own line (node/cmd/plinth-node/init.go).
var initLine = regexp.MustCompile(`init started at ([0-9.]+)s of the boot clock \(CLOCK_BOOTTIME\), now ([0-9.]+)s`)

// stamped is a log line of the guest: its time of day and its message.
type stamped struct {
	guest   time.Time
	arrived time.Time
	msg     string
}

// parseLog returns the console lines that are plinth-node's log lines,
// with the guest's time of day (in the year of their arrival here, which
// the lines leave out).
func parseLog(lines []line) []stamped {
	var out []stamped
	for _, l := range lines {
		m := logLine.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		t, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.UTC)
		if err != nil {
			continue
		}
		out = append(out, stamped{guest: withYear(t, l.at), arrived: l.at, msg: m[2]})
	}
	return out
}

// withYear puts t (parsed without a year) into the year that brings it
// closest to ref.
func withYear(t, ref time.Time) time.Time {
	var best time.Time
	for y := ref.Year() - 1; y <= ref.Year()+1; y++ {
		c := time.Date(y, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
		if best.IsZero() || c.Sub(ref).Abs() < best.Sub(ref).Abs() {
			best = c
		}
	}
	return best
}

// guestOffset is the boot's (host time - guest time of day): the smallest
// over its log lines of arrival minus stamp.
func guestOffset(logs []stamped) (time.Duration, error) {
	if len(logs) == 0 {
		return 0, fmt.Errorf("no log line of plinth-node on the console")
	}
	off := logs[0].arrived.Sub(logs[0].guest)
	for _, l := range logs[1:] {
		off = min(off, l.arrived.Sub(l.guest))
	}
	return off, nil
}

// milestones are the host times of one boot's events; a zero time is an
// event that did not happen (volumes published, on the node without
// claims).
type milestones struct {
	// reboot is when the reboot was asked for (SysRq-e) or the power cut;
	// off when qemu had ended, on when the next qemu had started.
	reboot, off, on time.Time
	// initStart: the kernel started init (PID 1).
	initStart time.Time
	// nodeUp: plinth-node's root is up: data partition mounted, volumes
	// recovered, network up, services started.
	nodeUp time.Time
	// containerd: containerd answers on its socket.
	containerd time.Time
	// kubelet: the kubelet's own health endpoint answers (in the guest).
	kubelet time.Time
	// nodeReady: the API server shows the Node Ready with the new boot ID.
	nodeReady time.Time
	// socket: Plinth's registration socket is ready for the kubelet.
	socket time.Time
	// registered: the kubelet asked Plinth's plugin for its node (the
	// NodeGetInfo of the plugin's registration; the CSINode object cannot
	// show it, since it keeps the driver listed across reboots).
	registered time.Time
	// published: Plinth's last NodePublishVolume before the first byte.
	published time.Time
	// firstByte: the probe printed what it read from its volume (the
	// container runtime's timestamp of the line).
	firstByte time.Time
}

// guestMilestones reads the guest's milestones from a boot's console
// lines and sets them in m; firstByteGuest is the probe's line's
// timestamp in the guest's time of day, converted with the same offset.
func guestMilestones(m *milestones, lines []line, firstByteGuest time.Time) error {
	logs := parseLog(lines)
	off, err := guestOffset(logs)
	if err != nil {
		return err
	}
	host := func(t time.Time) time.Time { return t.Add(off) }
	m.firstByte = host(firstByteGuest)
	first := func(sub string) time.Time {
		for _, l := range logs {
			if strings.Contains(l.msg, sub) {
				return host(l.guest)
			}
		}
		return time.Time{}
	}
	for _, l := range logs {
		s := initLine.FindStringSubmatch(l.msg)
		if s == nil {
			continue
		}
		started, err1 := strconv.ParseFloat(s[1], 64)
		now, err2 := strconv.ParseFloat(s[2], 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("init's line %q: %v %v", l.msg, err1, err2)
		}
		m.initStart = host(l.guest).Add(-time.Duration((now - started) * float64(time.Second)))
		break
	}
	m.nodeUp = first("is up: data directory")
	m.containerd = first("containerd is ready")
	m.kubelet = first("kubelet is ready")
	m.socket = first("ready for the kubelet")
	m.registered = first("NodeGetInfo ok")
	for _, l := range logs {
		if strings.HasPrefix(l.msg, "NodePublishVolume ok") && !host(l.guest).After(m.firstByte) {
			m.published = host(l.guest)
		}
	}
	for what, t := range map[string]time.Time{"init's start": m.initStart, "node up": m.nodeUp, "containerd ready": m.containerd, "kubelet ready": m.kubelet} {
		if t.IsZero() {
			return fmt.Errorf("the console shows no %s", what)
		}
	}
	return nil
}

// phase names the parts of a reboot, in the order the probe waits for
// them: each ends at a milestone, and the phases add up to the time from
// the reboot to the first byte.
var phases = []string{"shutdown", "kernel", "init", "containerd", "kubelet", "plinth", "pod start"}

// split is the reboot's phases in seconds (in the order of phases), and
// the total last. The chain of milestones is made monotonic: each
// milestone counts from the one before it, no earlier, and none past the
// first byte, so that an event the probe did not wait for (the plugin
// registering after the pod already read its volume; the Node posted
// Ready after the pod started) adds nothing. With claims the Plinth
// milestone is the later of the plugin's registration and the last
// publication; without, there is none (the probe needs no storage
// driver), and the phase is 0.
//
// The time between one qemu's end and the next's start is the harness's
// own (a real machine has its firmware there), and is left out: the
// shutdown ends when qemu ends, the kernel starts when qemu starts.
func (m *milestones) split(claims bool) []float64 {
	storage := time.Time{}
	if claims {
		storage = later(m.registered, m.published)
	}
	chain := []time.Time{m.initStart, m.nodeUp, m.containerd, m.nodeReady, storage, m.firstByte}
	prev := m.on
	out := []float64{m.off.Sub(m.reboot).Seconds()}
	for _, t := range chain {
		t = later(t, prev)
		if t.After(m.firstByte) {
			t = m.firstByte
		}
		out = append(out, t.Sub(prev).Seconds())
		prev = t
	}
	return append(out, out[0]+m.firstByte.Sub(m.on).Seconds())
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
