package volumehealth

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/node/kubernetes/metrics/metricstest"
	"source.plinth.dev/pkg/fsquota"
)

// TestReportAuditSaysWhatWasPutBack runs reportAudit, the audit's pure
// step, through a volume's walks: every walk that put files back is
// reported, a walk that could not examine everything once until that
// changes, and a clean walk never.
func TestReportAuditSaysWhatWasPutBack(t *testing.T) {
	r, rec, pv := testRound()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	r.Metrics = m
	a := &audit{round: r, incomplete: map[string]string{}}
	clean := fsquota.Restored{Checked: 10}
	escaped := fsquota.Restored{Checked: 10, Strays: 2, StrayBytes: 8 << 20, FirstStray: "out"}
	unreadable := fsquota.Restored{Checked: 10, Failed: 1, FirstFailure: "opening x: permission denied"}
	deep := fsquota.Restored{Checked: 10, Unchecked: 3}
	for _, step := range []struct {
		r      fsquota.Restored
		reason string
		want   []string // messages' fragments, one Event each for the claim and the PV
	}{
		{clean, "", nil},
		{escaped, ReasonQuotaRestored, []string{`2 files and directories of volume pv on node n (the first: "out")`, "the 8Mi they hold did not count", "count again now"}},
		{escaped, ReasonQuotaRestored, []string{"2 files and directories"}}, // moved out again
		{clean, "", nil},
		{unreadable, ReasonAuditIncomplete, []string{"1 entry could not be examined (opening x: permission denied)"}},
		{unreadable, "", nil}, // the same gap: said once
		{deep, ReasonAuditIncomplete, []string{"3 directories deeper than 1000 levels could not be examined"}},
		{clean, "", nil},
		{deep, ReasonAuditIncomplete, []string{"3 directories deeper"}}, // a new gap after a clean walk
	} {
		a.reportAudit(pv, step.r)
		checkWarnings(t, fmt.Sprintf("after %+v", step.r), rec, step.reason, step.want)
	}
	// The two walks that put files back are counted for alerts; the
	// walks that could not examine everything put nothing back.
	f, err := metricstest.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Value("plinth_quota_audit_restored_entries_total"); got != 4 {
		t.Errorf("plinth_quota_audit_restored_entries_total = %v, want 4", got)
	}
	if got := f.Value("plinth_quota_audit_restored_bytes_total"); got != 16<<20 {
		t.Errorf("plinth_quota_audit_restored_bytes_total = %v, want %d", got, 16<<20)
	}
}

// TestReportReleasedCountsForTheOperator: what the quota watch released
// outside every volume belongs to no claim: it is counted in the released
// counters and logged, and no Event is made; nothing released, nothing
// counted.
func TestReportReleasedCountsForTheOperator(t *testing.T) {
	r, rec, _ := testRound()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	r.Metrics = m
	a := &audit{round: r, incomplete: map[string]string{}}
	a.reportReleased(fsquota.Restored{})
	a.reportReleased(fsquota.Restored{Checked: 40, Strays: 2, StrayBytes: 4 << 20, FirstStray: "/data/kubelet/pods/x/quiet"})
	if len(rec.Events) != 0 {
		t.Errorf("Events for a release outside every volume: %d, want none (no claim's)", len(rec.Events))
	}
	f, err := metricstest.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Value("plinth_quota_watch_released_entries_total"); got != 2 {
		t.Errorf("plinth_quota_watch_released_entries_total = %v, want 2", got)
	}
	if got := f.Value("plinth_quota_watch_released_bytes_total"); got != 4<<20 {
		t.Errorf("plinth_quota_watch_released_bytes_total = %v, want %d", got, 4<<20)
	}
	if got := f.Value("plinth_quota_audit_restored_entries_total"); got != 0 {
		t.Errorf("plinth_quota_audit_restored_entries_total = %v, want 0: a release is not a volume's repair", got)
	}
}

// TestReportReclaimedTellsTheNeighbour: room of a volume's project quota
// that moved-in files took, and that was given back, is told to the
// volume's claim and PV as a Warning VolumeQuotaReclaimed, with how much
// and where the files came from (a neighbour volume, or outside every
// volume); nothing reclaimed, no Event.
func TestReportReclaimedTellsTheNeighbour(t *testing.T) {
	r, rec, pv := testRound()
	a := &audit{round: r, incomplete: map[string]string{}}
	for _, step := range []struct {
		r    volume.Reclaimed
		want []string
	}{
		{volume.Reclaimed{}, nil},
		{volume.Reclaimed{Entries: 1, Bytes: 4 << 20, Sources: []volume.ReclaimedSource{{From: "pvc-a", Entries: 1, Bytes: 4 << 20, First: "quiet"}}},
			[]string{`1 file or directory holding 4Mi of volume pvc-a on node n (moved by a process using that volume; the first: "quiet")`, "project quota of volume pv", "free again"}},
		{volume.Reclaimed{Entries: 2, Bytes: 8 << 20, Sources: []volume.ReclaimedSource{{Entries: 2, Bytes: 8 << 20, First: "/data/emptydir/quiet"}}},
			[]string{`2 files and directories holding 8Mi from outside every volume on node n`, `"/data/emptydir/quiet"`, "project quota of volume pv"}},
	} {
		a.reportReclaimed(pv, step.r)
		checkWarnings(t, fmt.Sprintf("after %+v", step.r), rec, ReasonQuotaReclaimed, step.want)
	}
}

// TestReclaimedNamesEverySource: when files of several sources were
// moved into one volume's project quota within one report, its claim's
// VolumeQuotaReclaimed says each source with what it took (two
// neighbours and outside every volume), and past three sources the
// three that took most and how many more there were, with what they
// took; the totals are the sum. The engine (volume.Manager) notes the
// repairs and releases as the quota watch does.
func TestReclaimedNamesEverySource(t *testing.T) {
	ids, err := fsquota.NewIDAllocator(t.TempDir(), volume.FirstProjectID, volume.LastProjectID)
	if err != nil {
		t.Fatal(err)
	}
	m := &volume.Manager{ProjectIDs: ids}
	b, err := ids.Allocate("pv")
	if err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	into := func(first string, entries, bytes int64) fsquota.Restored {
		return fsquota.Restored{Strays: entries, StrayBytes: bytes, FirstStray: first,
			From: map[uint32]fsquota.Charge{b: {Entries: entries, Bytes: bytes, First: first}}}
	}
	r, rec, pv := testRound()
	a := &audit{round: r, incomplete: map[string]string{}}

	m.NoteRepair("pvc-a", into("a1", 1, 4*mib))
	m.NoteRepair("pvc-c", into("c1", 2, 8*mib))
	m.NoteRelease(into("/data/emptydir/o1", 3, 16*mib))
	m.NoteRepair("pvc-a", into("a2", 1, 4*mib))
	a.reportReclaimed(pv, m.TakeReclaimed()["pv"])
	checkWarnings(t, "three sources", rec, ReasonQuotaReclaimed, []string{
		"7 files and directories holding 32Mi",
		"project quota of volume pv",
		`2 files and directories holding 8Mi of volume pvc-a on node n (moved by a process using that volume; the first: "a1")`,
		`2 files and directories holding 8Mi of volume pvc-c on node n (moved by a process using that volume; the first: "c1")`,
		`3 files and directories holding 16Mi from outside every volume on node n`, `"/data/emptydir/o1"`,
	})

	for i, v := range []string{"pvc-1", "pvc-2", "pvc-3", "pvc-4", "pvc-5"} {
		m.NoteRepair(v, into("f", 1, int64(i+1)*mib))
	}
	a.reportReclaimed(pv, m.TakeReclaimed()["pv"])
	checkWarnings(t, "five sources", rec, ReasonQuotaReclaimed, []string{
		"5 files and directories holding 15Mi",
		"1 file or directory holding 5Mi of volume pvc-5",
		"1 file or directory holding 4Mi of volume pvc-4",
		"1 file or directory holding 3Mi of volume pvc-3",
		"and 2 more sources holding 3Mi",
	})
}

// checkWarnings takes the Events rec recorded: none when want is empty,
// else one for the claim and one for the PV, each a Warning of reason
// that says every fragment of want.
func checkWarnings(t *testing.T, when string, rec *record.FakeRecorder, reason string, want []string) {
	t.Helper()
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if len(want) == 0 {
		if len(got) != 0 {
			t.Errorf("%s: Events %q, want none", when, got)
		}
		return
	}
	if len(got) != 2 {
		t.Errorf("%s: Events %q, want one for the claim and one for the PV", when, got)
		return
	}
	for _, ev := range got {
		if !strings.HasPrefix(ev, "Warning "+reason+" ") {
			t.Errorf("%s: Event %q, want a Warning %s", when, ev, reason)
		}
		for _, w := range want {
			if !strings.Contains(ev, w) {
				t.Errorf("%s: Event %q does not say %q", when, ev, w)
			}
		}
	}
}

// TestAuditHandsOverReclaimedRoom: the audit's walk of a volume reports
// the files it put back to that volume's claim itself, and hands the room
// they had taken of other volumes' projects to the engine
// (Auditor.NoteReclaimed), whose reclaimed room its reporter tells those
// volumes' claims as it does the quota watch's.
func TestAuditHandsOverReclaimedRoom(t *testing.T) {
	r, rec := boundRound(t)
	charged := map[uint32]fsquota.Charge{1048577: {Entries: 1, Bytes: 4 << 20, First: "escape"}}
	au := &walkAuditor{r: fsquota.Restored{Checked: 2, Strays: 1, StrayBytes: 4 << 20, FirstStray: "escape", From: charged}}
	r.Auditor = au
	a := &audit{round: r, limiter: rate.NewLimiter(rate.Inf, 1), incomplete: map[string]string{}}
	a.auditAll(context.Background())
	if len(au.noted) != 1 || au.noted[0].from != "pv" || !maps.Equal(au.noted[0].charged, charged) {
		t.Errorf("handed over: %+v; want volume pv's walk's charges %+v", au.noted, charged)
	}
	if len(rec.Events) != 2 || !strings.HasPrefix(<-rec.Events, "Warning "+ReasonQuotaRestored) {
		t.Errorf("the walked volume's claim and PV were not told of the repair")
	}
}

// TestAuditSearchesOutsideEveryVolume: each round of the audit, after
// the volumes' walks, also searches the data filesystem outside every
// volume for entries carrying a volume's project ID (the quota watch's
// search, Auditor.ReleaseOutside), paced by the audit's own limiter, and
// notes what it released (Auditor.NoteRelease), so that the reporter
// counts it and tells the volume whose room it had taken, as it does the
// watch's releases. Without the watch (a kernel before 5.9, no
// CAP_SYS_ADMIN) nothing else ever releases such a file.
func TestAuditSearchesOutsideEveryVolume(t *testing.T) {
	r, _ := boundRound(t)
	released := fsquota.Restored{Checked: 9, Strays: 1, StrayBytes: 4 << 20, FirstStray: "/data/emptydir/f",
		From: map[uint32]fsquota.Charge{1048577: {Entries: 1, Bytes: 4 << 20, First: "/data/emptydir/f"}}}
	au := &walkAuditor{outside: released}
	r.Auditor = au
	// A limiter that gives no token back within the test: the search's
	// pace takes one of its five.
	limiter := rate.NewLimiter(rate.Every(time.Hour), 5)
	a := &audit{round: r, limiter: limiter, incomplete: map[string]string{}}
	a.auditAll(context.Background())
	if want := []string{"walk pv", "search outside"}; !slices.Equal(au.calls, want) {
		t.Fatalf("a round of the audit: %q, want %q", au.calls, want)
	}
	if !au.paced || limiter.Tokens() > 4.5 {
		t.Error("the search outside every volume was not paced by the audit's limiter")
	}
	if len(au.released) != 1 || !reflect.DeepEqual(au.released[0], released) {
		t.Errorf("noted releases: %+v, want the search's %+v", au.released, released)
	}
}

// walkAuditor is an Auditor whose walks all return r, whose search
// outside every volume returns outside, and which records what it is
// asked and handed over.
type walkAuditor struct {
	r, outside fsquota.Restored
	calls      []string
	paced      bool
	released   []fsquota.Restored
	noted      []struct {
		from    string
		charged map[uint32]fsquota.Charge
	}
}

func (w *walkAuditor) RestoreProjectIDs(_ context.Context, id string, _ func(context.Context) error) (fsquota.Restored, error) {
	w.calls = append(w.calls, "walk "+id)
	return w.r, nil
}
func (w *walkAuditor) ReleaseOutside(ctx context.Context, pace func(context.Context) error) (fsquota.Restored, error) {
	w.calls = append(w.calls, "search outside")
	w.paced = pace != nil && pace(ctx) == nil
	return w.outside, nil
}
func (w *walkAuditor) NoteRelease(r fsquota.Restored)             { w.released = append(w.released, r) }
func (w *walkAuditor) Repaired() <-chan struct{}                  { return nil }
func (w *walkAuditor) TakeRepairs() map[string]fsquota.Restored   { return nil }
func (w *walkAuditor) TakeReleases() fsquota.Restored             { return fsquota.Restored{} }
func (w *walkAuditor) TakeReclaimed() map[string]volume.Reclaimed { return nil }
func (w *walkAuditor) NoteReclaimed(from string, charged map[uint32]fsquota.Charge) {
	w.noted = append(w.noted, struct {
		from    string
		charged map[uint32]fsquota.Charge
	}{from, charged})
}

// boundRound is testRound with its volume's PV Bound and listed, and the
// round's metrics registered: a round the audit walks that volume in.
func boundRound(t *testing.T) (*round, *record.FakeRecorder) {
	t.Helper()
	r, rec, pv := testRound()
	pv.Status.Phase = corev1.VolumeBound
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r.Metrics = m
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := idx.Add(pv); err != nil {
		t.Fatal(err)
	}
	r.lister = corelisters.NewPersistentVolumeLister(idx)
	return r, rec
}
