package main

import (
	"fmt"
	"strings"
	"time"

	"source.plinth.dev/bench/result"
)

// measured is one reboot: its milestones and its phases (split).
type measured struct {
	claims bool
	m      milestones
	split  []float64
}

// describe is one reboot's phases on one line.
func describe(split []float64) string {
	var b strings.Builder
	for i, p := range phases {
		fmt.Fprintf(&b, "%s %.2f s, ", p, split[i])
	}
	fmt.Fprintf(&b, "total %.2f s", split[len(split)-1])
	return b.String()
}

// phaseAxis names the x axis: each phase by its number, the total last.
func phaseAxis() string {
	var b strings.Builder
	for i, p := range phases {
		fmt.Fprintf(&b, "%d %s, ", i+1, p)
	}
	fmt.Fprintf(&b, "%d total", len(phases)+1)
	return "phase (" + b.String() + ")"
}

// writeResult writes one kind's reboots ("clean" or "cut") as a Result:
// x is the phase (the total last), one series with claims and the
// baseline without.
func writeResult(out, kind string, runs []measured, hangs []string) error {
	series := map[bool]*result.Series{false: {Name: configName(false)}, true: {Name: configName(true)}}
	for claims, s := range series {
		for i := range len(phases) + 1 {
			var vals []float64
			for _, r := range runs {
				if r.claims == claims {
					vals = append(vals, r.split[i])
				}
			}
			// Without claims there is no Plinth phase: no point, rather
			// than a 0 that reads as a measurement (and sets the
			// plot's unit to ns).
			if len(vals) > 0 && (claims || i >= len(phases) || phases[i] != "plinth") {
				s.Points = append(s.Points, result.Point{X: float64(i + 1), Runs: vals})
			}
		}
	}
	what := map[string]string{"clean": "Clean reboot (SysRq-e, init powers off)", "cut": "Power cut (qemu killed)"}[kind]
	r := &result.Result{
		Name:     "reboot-" + kind,
		Title:    what + " to a pod reading its volume, by phase",
		X:        result.Axis{Label: phaseAxis()},
		Y:        result.Axis{Label: "time", Unit: "s"},
		Baseline: configName(false),
		Series:   []result.Series{*series[false], *series[true]},
		Goals: []string{"Issue 40 item 4 sets no number: the reboot's cost to a workload, by phase, beside the same node's reboot without claims. " +
			"Plinth's share is its own phase (waiting for the plugin's registration and the publications after the Node is Ready) and what pod start takes beyond the baseline's."},
		Notes: append(resultNotes(), milestoneNotes(runs)...),
	}
	if len(hangs) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("Reboots of this run that hung, the guest kernel reporting soft lockups, and are not in the figures (the node was then power-cut and booted again, unmeasured): %s.", strings.Join(hangs, "; ")))
	}
	return result.Write(out, r)
}

func resultNotes() []string {
	return []string{
		"The VM node (test/nodevm): the node image's test variant booted in qemu under TCG (no KVM), 2 vCPUs, 3 GiB, a 2 GiB sparse data disk (virtio, a file on this host's disk), plinth.verbosity=1; joined over qemu's user network to a control plane on this host (apiserver, etcd, controller-manager, scheduler). The data disk is formatted at the first boot, which is not measured.",
		"The probe (nodevm.ProbePod, the pod of test/e2evm's TestVolumesSurviveReboot): busybox, RestartPolicy Always, which wrote a marker to its filesystem volume and one to each of its two block volumes when it first ran and prints what it reads back at every start, with the kernel's boot ID. claims: a filesystem claim at /data and two block claims (1 MiB each, Plinth's class). no-claims (the baseline): the same pod with /data an emptyDir on the same disk and no block devices. Each reboot checks the markers read back.",
		"Times, all on this host's clock: qemu's end and start, and the Node Ready with the new boot ID (a watch on the Node), as this host saw them; init's start from its own line (CLOCK_BOOTTIME at its start, and at the line's stamp); plinth-node's log lines (root up, containerd is ready, NodeGetInfo and NodePublishVolume calls) by their time of day in the guest; the probe's line by the container runtime's timestamp. The guest's time of day is brought onto this host's by the smallest (arrival on the console - stamp) over the boot's log lines.",
		"Phases are the differences along the chain qemu start → init → root up → containerd ready → Node Ready → Plinth ready (claims: the later of the plugin's registration, NodeGetInfo, and the last NodePublishVolume before the probe's line) → the probe's line; a milestone counts from the one before it, never earlier, and none past the probe's line, so an event the probe did not wait for adds nothing. The total adds the shutdown to the time from qemu's start; the harness's own gap between one qemu's end and the next's start (a real machine's firmware time) is left out.",
		"The baseline's reboots run first, then the probe's namespace is deleted and the claims' probe is made; each kind alternates clean and power cut. The machine (2 cores) is shared with other sessions; under TCG every guest instruction is emulated, so the absolute times are many times a real machine's, the split and the ratios are what carry over.",
	}
}

// milestoneNotes gives, per configuration, the median time of each
// milestone from qemu's start.
func milestoneNotes(runs []measured) []string {
	var out []string
	for _, claims := range []bool{false, true} {
		at := map[string][]float64{}
		var order []string
		add := func(name string, t, on time.Time) {
			if t.IsZero() {
				return
			}
			if _, ok := at[name]; !ok {
				order = append(order, name)
			}
			at[name] = append(at[name], t.Sub(on).Seconds())
		}
		for _, r := range runs {
			if r.claims != claims {
				continue
			}
			m := r.m
			for _, e := range []struct {
				name string
				t    time.Time
			}{
				{"init", m.initStart}, {"root up", m.nodeUp}, {"containerd ready", m.containerd}, {"kubelet healthz", m.kubelet},
				{"Node Ready", m.nodeReady}, {"registration socket", m.socket}, {"plugin registered (NodeGetInfo)", m.registered},
				{"last NodePublishVolume", m.published}, {"probe's line", m.firstByte},
			} {
				add(e.name, e.t, m.on)
			}
		}
		var parts []string
		for _, n := range order {
			parts = append(parts, fmt.Sprintf("%s %.2f", n, result.Median(at[n])))
		}
		if len(parts) > 0 {
			out = append(out, fmt.Sprintf("%s: milestones, median s after qemu started: %s", configName(claims), strings.Join(parts, ", ")))
		}
	}
	return out
}
