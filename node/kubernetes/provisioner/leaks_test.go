package provisioner

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"source.plinth.dev/node/kubernetes/volume"
	"source.plinth.dev/pkg/fsquota"
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
	all, err := fsquota.Projects(m.Data.Volumes.FullPath())
	if err != nil {
		return nil, err
	}
	out := map[uint32]fsquota.Quota{}
	for id, q := range all {
		if id >= volume.FirstProjectID && id <= volume.LastProjectID && q.Limits != (fsquota.Limits{}) {
			out[id] = q
		}
	}
	return out, nil
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
