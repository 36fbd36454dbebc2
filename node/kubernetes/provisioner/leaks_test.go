package provisioner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/volumetest"
)

// Besides its volumes, the volume layer keeps state about them: a claim on
// a project ID per filesystem volume (state/projects), the quota limits
// on that ID in the filesystem itself, a reclaim-policy record (state/
// records) and, while an operation runs, an intent record (state/
// operations). Each must go with its volume; one that outlives it is a
// leak as much as a volume without a claim is. The crash tests count them
// after the settle. Project IDs and quotas exist only where quotas are
// enforced: in the kernel-test VM, not on this host.

// stateCount is what a check of the volume layer's state found.
type stateCount struct {
	claims, quotas, records, intents int
	leaks                            []string
}

// quotaBaseline is the quota records in the volume range on the env's
// filesystem before the test: the VM's disk is shared with earlier tests
// and packages, and a record they left is not this test's leak.
func quotaBaseline(t *testing.T, e *env) map[uint32]fsquota.Quota {
	t.Helper()
	if !e.Vols.CapacityEnforced() {
		return nil
	}
	ps, err := volumeRangeProjects(e.Vols)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d quota records in the volumes' project ID range on the data filesystem before the test", len(ps))
	return ps
}

// volumeRangeProjects lists the quota records with limits in the project
// ID range of volumes, on m's data filesystem.
func volumeRangeProjects(m *volume.Manager) (map[uint32]fsquota.Quota, error) {
	return volumetest.LimitedProjects(m.Data.Volumes.FullPath(), volume.FirstProjectID, volume.LastProjectID)
}

// countState counts the volume layer's state in m and reports what no
// complete volume among entries accounts for: claims whose owner is no
// volume, or whose volume's directory carries another ID; quota records
// on IDs no volume's directory carries (and that were not in baseline
// with the same limits); policy records of no volume; any intent record
// (after a settle no operation is in flight).
func countState(ctx context.Context, m *volume.Manager, entries []volume.Entry, baseline map[uint32]fsquota.Quota) (stateCount, error) {
	var c stateCount
	// The project ID on each filesystem volume's directory.
	vols := map[string]bool{}
	dirIDs := map[string]uint32{}
	usedIDs := map[uint32]bool{}
	for _, en := range entries {
		if en.Pending != "" || en.Problem != "" {
			continue
		}
		vols[en.ID] = true
		if en.Mode != volume.Filesystem || !m.CapacityEnforced() {
			continue
		}
		_, path, err := m.Locate(ctx, en.ID)
		if err != nil {
			return c, err
		}
		q, err := fsquota.GetQuota(path)
		if err != nil {
			return c, err
		}
		dirIDs[en.ID] = q.ProjectID
		usedIDs[q.ProjectID] = true
	}
	if m.ProjectIDs != nil {
		claims, err := m.ProjectIDs.Claimed()
		if err != nil {
			return c, err
		}
		c.claims = len(claims)
		for pid, owner := range claims {
			switch dir, ok := dirIDs[owner]; {
			case !vols[owner]:
				c.leaks = append(c.leaks, fmt.Sprintf("leaked project ID claim: %d held by %s, which is no volume", pid, owner))
			case !ok || dir != pid:
				c.leaks = append(c.leaks, fmt.Sprintf("leaked project ID claim: %d held by %s, whose directory has project ID %d", pid, owner, dir))
			}
		}
	}
	if m.CapacityEnforced() {
		quotas, err := volumeRangeProjects(m)
		if err != nil {
			return c, err
		}
		c.quotas = len(quotas)
		for pid, q := range quotas {
			if b, ok := baseline[pid]; usedIDs[pid] || (ok && b.Limits == q.Limits) {
				continue
			}
			c.leaks = append(c.leaks, fmt.Sprintf("leaked quota: project %d limited to %d bytes and %d inodes (%d bytes used), on no volume's directory",
				pid, q.Limits.Bytes, q.Limits.Inodes, q.UsedBytes))
		}
	}
	records, err := m.Data.State.Records.Entries()
	if err != nil {
		return c, err
	}
	c.records = len(records)
	for _, id := range records {
		if !vols[id] {
			c.leaks = append(c.leaks, fmt.Sprintf("leaked reclaim-policy record of %s, which is no volume", id))
		}
	}
	intents, err := m.Data.State.Operations.Entries()
	if err != nil {
		return c, err
	}
	c.intents = len(intents)
	for _, id := range intents {
		c.leaks = append(c.leaks, fmt.Sprintf("intent record of %s left after the settle", id))
	}
	slices.Sort(c.leaks)
	return c, nil
}

func (c stateCount) String() string {
	return fmt.Sprintf("%d project ID claims, %d quota records, %d reclaim-policy records, %d intent records; %d leaked",
		c.claims, c.quotas, c.records, c.intents, len(c.leaks))
}

// TestCountStateFindsLeaks is the negative control of countState, the
// crash tests' count of the volume layer's leaked state: with one real
// volume beside the state of a volume that is gone (its reclaim-policy
// record, an intent record, and where quotas are enforced its project ID
// claim and a quota on that ID), each piece must be reported, and the real
// volume's own state must not be. Without it, a countState that lists but
// never compares would let TestCrashSafety pass over every leak.
func TestCountStateFindsLeaks(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	baseline := quotaBaseline(t, e)
	count := func() stateCount {
		t.Helper()
		entries, err := e.Vols.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c, err := countState(ctx, e.Vols, entries, baseline)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	kept := ownership.VolumeIDFor("6d1b7c2e-4f0a-4b8e-9c3d-2a5e8f1b0c01")
	if _, err := e.Vols.Create(ctx, kept, volume.Filesystem, 1<<20); err != nil {
		t.Fatal(err)
	}
	if c := count(); len(c.leaks) > 0 {
		t.Fatalf("a single healthy volume counted as leaks: %s\n%s", c, strings.Join(c.leaks, "\n"))
	}

	gone := ownership.VolumeIDFor("6d1b7c2e-4f0a-4b8e-9c3d-2a5e8f1b0c02")
	plant := func(dir *localstorage.Directory) {
		t.Helper()
		f, err := dir.ChildFile(gone)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.WriteAtomic([]byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Remove() })
	}
	plant(&e.Vols.Data.State.Records)
	plant(&e.Vols.Data.State.Operations)
	want := []string{"leaked reclaim-policy record of " + gone, "intent record of " + gone}
	if e.Vols.CapacityEnforced() {
		pid, err := e.Vols.ProjectIDs.Allocate(gone)
		if err != nil {
			t.Fatal(err)
		}
		// A quota record outlives the directory it was set on.
		scratch := filepath.Join(filepath.Dir(e.Vols.Data.Volumes.FullPath()), "leak-scratch")
		setOnScratch := func(l fsquota.Limits) {
			t.Helper()
			if err := os.Mkdir(scratch, 0o700); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(scratch)
			if err := fsquota.SetQuota(scratch, pid, l); err != nil {
				t.Fatal(err)
			}
		}
		setOnScratch(fsquota.Limits{Bytes: 1 << 20, Inodes: 100})
		t.Cleanup(func() {
			setOnScratch(fsquota.Limits{})
			_ = e.Vols.ProjectIDs.Release(pid, gone)
		})
		want = append(want,
			fmt.Sprintf("leaked project ID claim: %d held by %s, which is no volume", pid, gone),
			fmt.Sprintf("leaked quota: project %d limited to %d bytes", pid, 1<<20))
	}
	c := count()
	t.Logf("with the state of a volume that is gone planted: %s\n%s", c, strings.Join(c.leaks, "\n"))
	for _, w := range want {
		if !slices.ContainsFunc(c.leaks, func(l string) bool { return strings.HasPrefix(l, w) }) {
			t.Errorf("countState did not report %q", w)
		}
	}
	if len(c.leaks) != len(want) {
		t.Errorf("countState reported %d leaks, want exactly the %d planted", len(c.leaks), len(want))
	}
}
