package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"source.plinth.dev/pkg/fsquota"
)

// TestQuarantineKeepsDataAndRoom: a volume moved into quarantine leaves
// the volume list, keeps its files, its project ID (which Recover does
// not release) and its room (Space), and comes back untouched by Restore
// or by a Create of its ID; DeleteQuarantined removes it for good.
func TestQuarantineKeepsDataAndRoom(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		m := newManagerOn(t, b)
		for _, mode := range []Mode{Filesystem, Block} {
			id := "pvc-q-" + mode.String()
			if _, err := m.Create(ctx, id, mode, 8*MiB); err != nil {
				t.Fatal(err)
			}
			// Without a record (no consumer ever seen) there is nothing
			// to quarantine: such a volume is a crash leftover.
			if err := m.Quarantine(ctx, id, time.Now()); !errors.Is(err, ErrInvalid) {
				t.Fatalf("quarantining %s without a record: %v, want ErrInvalid", id, err)
			}
			if err := m.SetReclaimPolicy(ctx, id, ReclaimDelete); err != nil {
				t.Fatal(err)
			}
		}
		fsDir, _ := m.paths("pvc-q-filesystem")
		if err := os.WriteFile(filepath.Join(fsDir, "data"), []byte("precious"), 0o644); err != nil {
			t.Fatal(err)
		}
		pidBefore := projectOf(t, m, fsDir)
		before, err := m.Space(ctx)
		if err != nil {
			t.Fatal(err)
		}

		at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
		for _, id := range []string{"pvc-q-filesystem", "pvc-q-block"} {
			if err := m.Quarantine(ctx, id, at); err != nil {
				t.Fatal(err)
			}
			if err := m.Quarantine(ctx, id, at); !errors.Is(err, ErrNotFound) {
				t.Errorf("quarantining %s twice: %v, want ErrNotFound", id, err)
			}
		}
		if ids := listIDs(t, m); len(ids) != 0 {
			t.Errorf("volumes listed while in quarantine: %v", ids)
		}
		qs, err := m.Quarantined(ctx)
		if err != nil || len(qs) != 2 {
			t.Fatalf("quarantined: %+v, %v; want both", qs, err)
		}
		for _, q := range qs {
			if !q.Since.Equal(at) {
				t.Errorf("%s quarantined since %v, want %v", q.ID, q.Since, at)
			}
		}
		// Restarts: Recover keeps the project ID of a quarantined volume.
		restarted := newManager(t, filepath.Dir(m.Data.Volumes.FullPath()))
		if _, err := restarted.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		if restarted.ProjectIDs != nil {
			claims, err := restarted.ProjectIDs.Claimed()
			if err != nil {
				t.Fatal(err)
			}
			if owner := claims[pidBefore]; owner != "pvc-q-filesystem" {
				t.Errorf("after Recover, project ID %d of the quarantined volume is claimed by %q, want it kept", pidBefore, owner)
			}
		}
		after, err := m.Space(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// (Free is not compared: on the host, other writers change it.)
		if after.Promised != before.Promised || after.Unallocated != before.Unallocated {
			t.Errorf("space in quarantine %+v, before %+v: the quarantined volumes' room must stay counted", after, before)
		}

		// Its consumer is back: Restore for one, a Create of its ID for
		// the other.
		if err := m.Restore(ctx, "pvc-q-filesystem"); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(fsDir, "data")); err != nil || string(got) != "precious" {
			t.Errorf("restored data %q, %v; want %q", got, err, "precious")
		}
		if pid := projectOf(t, m, fsDir); pid != pidBefore {
			t.Errorf("restored volume has project ID %d, had %d", pid, pidBefore)
		}
		if _, err := m.Create(ctx, "pvc-q-block", Block, 8*MiB); err != nil {
			t.Fatal(err)
		}
		if qs, _ := m.Quarantined(ctx); len(qs) != 0 {
			t.Errorf("still in quarantine after Restore and Create: %+v", qs)
		}

		// And removed for good after its retention.
		if err := m.Quarantine(ctx, "pvc-q-filesystem", at); err != nil {
			t.Fatal(err)
		}
		if err := m.DeleteQuarantined(ctx, "pvc-q-filesystem"); err != nil {
			t.Fatal(err)
		}
		assertGone(t, m, "pvc-q-filesystem")
		if qs, _ := m.Quarantined(ctx); len(qs) != 0 {
			t.Errorf("in quarantine after DeleteQuarantined: %+v", qs)
		}
	})
}

// TestClusterIDRecordedOnce: the first cluster ID recorded stays, across
// restarts, and a later one is answered with it.
func TestClusterIDRecordedOnce(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, dir)
	if id, err := m.ClusterID(); id != "" || err != nil {
		t.Fatalf("new data directory: cluster %q, %v; want none", id, err)
	}
	if got, err := m.RecordCluster("uid-a"); got != "uid-a" || err != nil {
		t.Fatalf("recording: %q, %v", got, err)
	}
	if got, err := newManager(t, dir).RecordCluster("uid-b"); got != "uid-a" || err != nil {
		t.Errorf("recording another after a restart: %q, %v; want the first, uid-a", got, err)
	}
	if _, err := m.RecordCluster(""); !errors.Is(err, ErrInvalid) {
		t.Errorf("recording an empty ID: %v, want ErrInvalid", err)
	}
}

func listIDs(t *testing.T, m *Manager) []string {
	t.Helper()
	es, err := m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range es {
		ids = append(ids, e.ID)
	}
	return ids
}

// projectOf is the project ID of a filesystem volume's directory, 0 where
// quotas are not enforced.
func projectOf(t *testing.T, m *Manager, dir string) uint32 {
	t.Helper()
	if !m.CapacityEnforced() {
		return 0
	}
	q, err := fsquota.GetQuota(dir)
	if err != nil {
		t.Fatal(err)
	}
	return q.ProjectID
}
