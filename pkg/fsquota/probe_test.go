package fsquota_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/ktest"
)

func TestProbeVM(t *testing.T) {
	ktest.RequireVM(t)
	for _, tc := range []struct {
		disk    string
		wantErr string
	}{
		{disk: "xfs"},
		{disk: "ext4"},
		{disk: "xfs-noquota", wantErr: "xfs mounted without prjquota"},
		{disk: "xfs-projid16", wantErr: "only 16-bit project IDs"},
	} {
		t.Run(tc.disk, func(t *testing.T) {
			err := fsquota.Probe(ktest.Mount(t, tc.disk))
			t.Logf("Probe: %v", err)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Probe on %s: %v, want nil", tc.disk, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, fsquota.ErrUnsupported) {
				t.Fatalf("Probe on %s: %v, want ErrUnsupported saying %q", tc.disk, err, tc.wantErr)
			}
		})
	}
}

// TestSixteenBitProjectIDs shows why Probe refuses an XFS that stores
// only 16-bit project IDs although it enforces quotas: a small ID works
// there, and any ID above 2^16-1 (Plinth's start at 2^20) is refused by
// the kernel.
func TestSixteenBitProjectIDs(t *testing.T) {
	small, large := ktest.TempDir(t, "xfs-projid16"), ktest.TempDir(t, "xfs-projid16")
	if err := fsquota.SetQuota(small, 4242, fsquota.Limits{Bytes: 1 << 20}); err != nil {
		t.Fatalf("SetQuota with project ID 4242: %v, want success (quotas are enforced on this disk)", err)
	}
	if q, err := fsquota.GetQuota(small); err != nil || q.ProjectID != 4242 || q.Limits.Bytes != 1<<20 {
		t.Errorf("GetQuota after SetQuota with project ID 4242: %+v (%v)", q, err)
	}
	err := fsquota.SetQuota(large, 1<<20, fsquota.Limits{Bytes: 1 << 20})
	t.Logf("SetQuota with project ID 2^20: %v", err)
	if !errors.Is(err, unix.EINVAL) {
		t.Errorf("SetQuota with project ID 2^20: %v, want EINVAL", err)
	}
}

// TestProbeUnsupportedFilesystem runs on the host too.
func TestProbeUnsupportedFilesystem(t *testing.T) {
	ktest.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Error(err)
		}
	})
	err := fsquota.Probe(dir)
	if !errors.Is(err, fsquota.ErrUnsupported) || !strings.Contains(err.Error(), "neither XFS nor ext4") {
		t.Fatalf("Probe on tmpfs: %v, want ErrUnsupported saying 'neither XFS nor ext4'", err)
	}
	if err := fsquota.Probe(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Probe on a missing directory: %v, want ErrNotExist", err)
	}
}

// TestSetQuotaWithoutQuotaSupport checks that a filesystem without project
// quotas gets a clear error and keeps the directory as it was. On the host
// it uses a temporary directory (this host's kernel has no XFS quotas, and
// its root filesystem no prjquota); in the VM the XFS mounted without
// prjquota.
func TestSetQuotaWithoutQuotaSupport(t *testing.T) {
	ktest.RequireRoot(t)
	var dir string
	if ktest.InVM() {
		dir = ktest.TempDir(t, "xfs-noquota")
	} else {
		dir = t.TempDir()
		if fsquota.Probe(dir) == nil {
			t.Skip("the host's temporary directory enforces project quotas")
		}
	}
	err := fsquota.SetQuota(dir, 777, fsquota.Limits{Bytes: 1 << 20})
	if !errors.Is(err, fsquota.ErrUnsupported) || !strings.Contains(err.Error(), "setting quota on "+dir) {
		t.Fatalf("SetQuota on a filesystem without project quotas: %v, want ErrUnsupported naming the directory", err)
	}
	t.Logf("SetQuota: %v", err)
	if _, err := fsquota.GetQuota(dir); !errors.Is(err, fsquota.ErrNoQuota) {
		t.Errorf("after a failed SetQuota, GetQuota: %v, want ErrNoQuota (no project ID assigned)", err)
	}
}
