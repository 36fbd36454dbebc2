package core

import (
	"context"
	"errors"
	"strings"
	"testing"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/test/ktest"
)

// TestMain lets `make test-kernel` run this package in the kernel VM too,
// where real XFS and ext4 disks with and without project quotas exist.
func TestMain(m *testing.M) { ktest.Main(m) }

// TestDataDirOnRealFilesystems checks the node's verdict on quota support
// with the real probe, on filesystems that do and do not enforce quotas.
func TestDataDirOnRealFilesystems(t *testing.T) {
	ktest.RequireVM(t)
	for _, c := range []struct {
		disk     string
		enforced bool
		// cause is what the refusal must name.
		cause string
	}{
		{"xfs", true, ""},
		{"ext4", true, ""},
		{"xfs-noquota", false, "prjquota"},
		{"xfs-projid16", false, "projid32bit"},
	} {
		t.Run(c.disk, func(t *testing.T) {
			var d localstorage.DataDirectory
			if err := d.Place(ktest.TempDir(t, c.disk)); err != nil {
				t.Fatal(err)
			}
			dd, err := PrepareDataDir(&d, DataDirOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if dd.QuotaEnforced() != c.enforced {
				t.Fatalf("QuotaEnforced = %v, want %v (probe: %v)", dd.QuotaEnforced(), c.enforced, dd.QuotaProbeError())
			}
			vols, err := volume.New(volume.Config{Data: &d, QuotaError: dd.QuotaProbeError()})
			if err != nil {
				t.Fatal(err)
			}
			if c.enforced {
				if !vols.CapacityEnforced() {
					t.Errorf("the volume engine does not enforce capacity on %s", c.disk)
				}
				return
			}
			// The refusal names the cause (the missing mount option, the
			// filesystem's 16-bit project IDs) and the way out.
			_, err = vols.Create(context.Background(), "pvc-refused", volume.Filesystem, 1<<20)
			if !errors.Is(err, volume.ErrCapacityNotEnforced) || !strings.Contains(err.Error(), c.cause) || !strings.Contains(err.Error(), volume.AllowUnenforcedCapacityFlag) {
				t.Errorf("refusal on %s: %v", c.disk, err)
			}
		})
	}
}
