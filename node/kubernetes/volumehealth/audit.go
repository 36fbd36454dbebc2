package volumehealth

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/pkg/fsquota"
)

// Event reasons of the audit.
const (
	// ReasonQuotaRestored: files found moved out of a volume's project
	// quota were put back.
	ReasonQuotaRestored = "VolumeQuotaRestored"
	// ReasonAuditIncomplete: the walk could not examine every file, so
	// some may still be outside the quota. A reason of its own, so that
	// an alert on restored files does not fire for it.
	ReasonAuditIncomplete = "VolumeQuotaAuditIncomplete"
	// ReasonQuotaReclaimed: files that were not the volume's had been
	// moved into its project quota, taking its room, and were taken
	// out of it. The user of the volume is the one who lost (writes
	// within its size failed meanwhile), not the one who did it.
	ReasonQuotaReclaimed = "VolumeQuotaReclaimed"
)

// Defaults of the audit (Config.Auditor).
const (
	// DefaultAuditInterval is the time between two walks of every
	// filesystem volume. What a process writes past its volume's size
	// between two walks stays on the data filesystem until the next one
	// counts it, so the interval bounds how long the overrun goes
	// unnoticed, not how large it is.
	DefaultAuditInterval = 10 * time.Minute
	// DefaultAuditRate is the most files and directories the walk
	// examines per second, over all volumes: each costs a handful of
	// system calls (open, fstat, an ioctl), so a node with a million
	// files spends about eight minutes a round on it, on one core a
	// small share of the time.
	DefaultAuditRate = 2000
)

// Auditor puts files that a volume's user moved out of the volume's
// project quota back in it (volume.Manager.RestoreProjectIDs). pace is
// called before each file, to bound the walk's rate. Repairs made between
// its walks, by the node's quota watch, are taken from TakeRepairs as soon
// as Repaired's channel closes, and reported as the walk's are; what the
// watch released outside every volume, from TakeReleases, is counted and
// logged (it belongs to no claim). The room the watch gave back to a
// volume whose project those files, or a neighbour's, had been moved
// into, from TakeReclaimed, is told to that volume's claim; the audit's
// own walks hand theirs over with NoteReclaimed, so that it is told the
// same way. After the volumes, each round also searches outside every
// volume (ReleaseOutside, the watch's search) and notes what it released
// with NoteRelease, as the watch does.
type Auditor interface {
	RestoreProjectIDs(ctx context.Context, volumeID string, pace func(context.Context) error) (fsquota.Restored, error)
	Repaired() <-chan struct{}
	TakeRepairs() map[string]fsquota.Restored
	TakeReleases() fsquota.Restored
	TakeReclaimed() map[string]volume.Reclaimed
	NoteReclaimed(from string, charged map[uint32]fsquota.Charge)
	ReleaseOutside(ctx context.Context, pace func(context.Context) error) (fsquota.Restored, error)
	NoteRelease(r fsquota.Restored)
}

// audit is the state of the monitor's audit loop.
type audit struct {
	*round
	limiter *rate.Limiter
	// incomplete is what each PV's last walk could not examine, reported
	// once until it changes.
	incomplete map[string]string
}

// auditAll walks every bound filesystem volume of this node once.
func (a *audit) auditAll(ctx context.Context) {
	pvs := a.watchedPVs()
	for _, pv := range pvs {
		if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock {
			continue
		}
		start := time.Now()
		r, err := a.Auditor.RestoreProjectIDs(ctx, pv.Spec.CSI.VolumeHandle, a.limiter.Wait)
		if ctx.Err() != nil {
			return
		}
		a.Metrics.Observe(metrics.Audit, start, metrics.Reason(err))
		if err != nil {
			// A volume gone or half-deleted is the condition checks'
			// to report.
			a.log.Warningf("PV %s: %v", pv.Name, err)
			continue
		}
		a.reportAudit(pv, r)
		a.Auditor.NoteReclaimed(pv.Spec.CSI.VolumeHandle, r.From)
	}
	forgetOthers(a.incomplete, pvs)
	a.releaseOutside(ctx)
}

// releaseOutside searches the data filesystem outside every volume for
// entries that carry a volume's project ID (an emptyDir's file moved into
// a neighbour's project) and takes them out of it, at the audit's pace.
// No volume's walk sees them, and the quota watch, which also searches
// when a volume's usage grows quietly, may not run at all (a kernel
// before 5.9, no CAP_SYS_ADMIN) or may miss a move (one hidden in the
// volume's own writes): without this such a file would take the
// neighbour's room until deleted. What it releases is noted as the
// watch's releases are, so the reporter counts it and tells the volume
// whose room it was.
func (a *audit) releaseOutside(ctx context.Context) {
	r, err := a.Auditor.ReleaseOutside(ctx, a.limiter.Wait)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		a.log.Warningf("quota audit: %v", err)
	}
	a.Auditor.NoteRelease(r)
}

// repairSettle is how long the report of a repair made between the walks
// waits for the rest of it: the quota watch puts back the entry it saw
// written, then walks the volume at once for the others a process moved,
// and the user hears of them in one Event rather than two.
const repairSettle = 2 * time.Second

// reportRepairs reports, until ctx ends, the repairs made between the
// walks (Auditor.TakeRepairs), repairSettle after the first of them.
func (a *audit) reportRepairs(ctx context.Context) {
	for {
		noted := a.Auditor.Repaired()
		taken, reclaimed := a.Auditor.TakeRepairs(), a.Auditor.TakeReclaimed()
		if len(taken)+len(reclaimed) > 0 {
			for _, pv := range a.watchedPVs() {
				if r, ok := taken[pv.Spec.CSI.VolumeHandle]; ok {
					a.reportRestored(pv, r)
				}
				if r, ok := reclaimed[pv.Spec.CSI.VolumeHandle]; ok {
					a.reportReclaimed(pv, r)
				}
			}
		}
		a.reportReleased(a.Auditor.TakeReleases())
		select {
		case <-ctx.Done():
			return
		case <-noted:
		}
		select {
		case <-ctx.Done():
			return
		case <-a.Clock.After(repairSettle):
		}
	}
}

// reportAudit reports one volume's walk: what it put back
// (reportRestored), and a Warning when the walk could not examine
// everything, until that changes.
func (a *audit) reportAudit(pv *corev1.PersistentVolume, r fsquota.Restored) {
	claim := pv.Spec.ClaimRef
	id := pv.Spec.CSI.VolumeHandle
	a.reportRestored(pv, r)
	gap := incompleteMessage(r)
	if gap == a.incomplete[pv.Name] {
		return
	}
	a.incomplete[pv.Name] = gap
	if gap == "" {
		return
	}
	msg := fmt.Sprintf("checking that every file of volume %s on node %s counts against its size: %s", id, a.NodeName, gap)
	a.log.Warningf("claim %s/%s: %s", claim.Namespace, claim.Name, msg)
	a.tell(pv, corev1.EventTypeWarning, ReasonAuditIncomplete, msg)
}

// reportRestored reports files put back into a volume's project quota: a
// Warning Event on the claim and the PV, and the restored counts in the
// metrics, whenever there were any (a walk or the watch finds new ones
// only if the user moved them again).
func (a *audit) reportRestored(pv *corev1.PersistentVolume, r fsquota.Restored) {
	if r.Strays == 0 {
		return
	}
	claim := pv.Spec.ClaimRef
	id := pv.Spec.CSI.VolumeHandle
	a.Metrics.QuotaRestored(r.Strays, r.StrayBytes)
	msg := restoredMessage(id, a.NodeName, r)
	a.log.Warningf("volume %s of claim %s/%s: %s", id, claim.Namespace, claim.Name, msg)
	a.tell(pv, corev1.EventTypeWarning, ReasonQuotaRestored, msg)
}

// reportReclaimed tells the user of the volume of pv that files not of
// its volume had taken room of its project quota, and that the room is
// free again: a Warning Event on the claim and the PV. It is the other
// side of a release or a repair (whose Event goes to the volume the
// files were moved out of): without it, the user whose writes failed
// within the claim's size would never learn why.
func (a *audit) reportReclaimed(pv *corev1.PersistentVolume, r volume.Reclaimed) {
	if r.Entries == 0 {
		return
	}
	claim := pv.Spec.ClaimRef
	id := pv.Spec.CSI.VolumeHandle
	msg := reclaimedMessage(id, a.NodeName, r)
	a.log.Warningf("volume %s of claim %s/%s: %s", id, claim.Namespace, claim.Name, msg)
	a.tell(pv, corev1.EventTypeWarning, ReasonQuotaReclaimed, msg)
}

// reclaimedShown is how many of a report's sources a VolumeQuotaReclaimed
// Event names: those that took most. The rest are summed, so that a node
// whose many volumes all moved files into one keeps its Event short.
const reclaimedShown = 3

// reclaimedMessage tells the user what took its volume's room, where each
// part came from (the reclaimedShown sources that took most, and how many
// more), and that the room is back.
func reclaimedMessage(id, node string, r volume.Reclaimed) string {
	const end = "A process changed their project ID (chattr -p, FS_IOC_FSSETXATTR)"
	into := fmt.Sprintf("had been moved into the project quota of volume %s, "+
		"so they counted against its size and writes within the size could fail; they were taken out of it, and the room is free again", id)
	if len(r.Sources) == 1 {
		return fmt.Sprintf("%s %s. %s", reclaimedSourceText(node, r.Sources[0]), into, end)
	}
	sources := slices.Clone(r.Sources)
	slices.SortStableFunc(sources, func(a, b volume.ReclaimedSource) int { return cmp.Compare(b.Bytes, a.Bytes) })
	var parts []string
	for _, s := range sources[:min(len(sources), reclaimedShown)] {
		parts = append(parts, reclaimedSourceText(node, s))
	}
	if rest := sources[min(len(sources), reclaimedShown):]; len(rest) > 0 {
		var bytes int64
		for _, s := range rest {
			bytes += s.Bytes
		}
		parts = append(parts, fmt.Sprintf("and %s holding %s", plural(int64(len(rest)), "more source", "more sources"),
			resource.NewQuantity(bytes, resource.BinarySI)))
	}
	held := resource.NewQuantity(r.Bytes, resource.BinarySI)
	return fmt.Sprintf("%s holding %s %s. They came from %d sources: %s. %s",
		plural(r.Entries, "file or directory", "files and directories"), held, into, len(sources), strings.Join(parts, "; "), end)
}

// reclaimedSourceText says what one source took and where it came from.
func reclaimedSourceText(node string, s volume.ReclaimedSource) string {
	from := fmt.Sprintf("from outside every volume on node %s (an emptyDir, a container's files or logs; the first: %q)", node, s.First)
	if s.From != "" {
		from = fmt.Sprintf("of volume %s on node %s (moved by a process using that volume; the first: %q)", s.From, node, s.First)
	}
	return fmt.Sprintf("%s holding %s %s", plural(s.Entries, "file or directory", "files and directories"),
		resource.NewQuantity(s.Bytes, resource.BinarySI), from)
}

// reportReleased reports entries outside every volume that the quota
// watch took out of volumes' project quotas: in the log and the released
// counters, for the operator, since they belong to no claim (the watch's
// own log says where each search found them).
func (a *audit) reportReleased(r fsquota.Restored) {
	if r.Strays == 0 {
		return
	}
	a.Metrics.QuotaReleased(r.Strays, r.StrayBytes)
	held := resource.NewQuantity(r.StrayBytes, resource.BinarySI)
	a.log.Warningf("%s outside every volume on node %s (the first: %s), holding %s, had been moved into volumes' project quotas and were taken out of them: a process on the node changed their project ID (chattr -p, FS_IOC_FSSETXATTR)",
		plural(r.Strays, "file or directory", "files and directories"), a.NodeName, r.FirstStray, held.String())
}

// restoredMessage tells the user what the walk put back, and how it
// could have happened.
func restoredMessage(id, node string, r fsquota.Restored) string {
	held := resource.NewQuantity(r.StrayBytes, resource.BinarySI)
	return fmt.Sprintf("%s of volume %s on node %s (the first: %q) had been moved out of the volume's project quota, "+
		"so the %s they hold did not count against its size; they count again now, and writes past the size fail. "+
		"A process using the volume changed their project ID (chattr -p, FS_IOC_FSSETXATTR, or a restore of saved project IDs)",
		plural(r.Strays, "file or directory", "files and directories"), id, node, r.FirstStray, held.String())
}

// incompleteMessage says what a walk could not examine, or "".
func incompleteMessage(r fsquota.Restored) string {
	var parts []string
	if r.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%s could not be examined (%s)", plural(r.Failed, "entry", "entries"), r.FirstFailure))
	}
	if r.Unchecked > 0 {
		parts = append(parts, fmt.Sprintf("%s deeper than %d levels could not be examined",
			plural(r.Unchecked, "directory", "directories"), fsquota.MaxTreeDepth))
	}
	return strings.Join(parts, "; ")
}

// plural is "1 one" or "n many".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
