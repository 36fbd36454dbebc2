package provisioner

import (
	"context"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/ktest"
)

// TestOvercommitLendsPromisedRoom: a class's overcommit parameter decides
// whether a claim may take room promised to filesystem volumes. With a
// filesystem claim promising 60% of the free space, a claim of the free
// space less 3/4 of the promise fits under ratio 2 (half the promise may
// be lent) and not under ratio 1 (all of it stays reserved). Only the VM's
// XFS enforces quotas, so only there does a promise hold room.
func TestOvercommitLendsPromisedRoom(t *testing.T) {
	ktest.RequireVM(t)
	e := newEnv(t, false)
	e.start(e.controller())
	var st unix.Statfs_t
	if err := unix.Statfs(e.Dir, &st); err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	free := int64(st.Bavail) * st.Bsize
	promise := free * 6 / 10 / mib * mib
	size := (free - promise*3/4) / mib * mib
	t.Logf("data filesystem: %d MiB free; promised %d MiB, then a claim of %d MiB", free/mib, promise/mib, size/mib)

	e.CreateClaim(controllertest.Claim{Name: "promised", Size: fmt.Sprintf("%dMi", promise/mib)})
	e.WaitBound("promised")
	for _, ratio := range []string{"1", "2"} {
		e.CreateClass(e.Class+"-r"+ratio, corev1.PersistentVolumeReclaimDelete, map[string]string{names.ParameterOvercommit: ratio})
	}
	kept := e.CreateClaim(controllertest.Claim{Name: "ratio-1", Class: e.Class + "-r1", Size: fmt.Sprintf("%dMi", size/mib)})
	e.WaitEvent(kept.UID, ReasonProvisioningFailed, "not enough space")
	e.NoPV(kept.UID)
	if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(context.Background(), kept.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lent := e.CreateClaim(controllertest.Claim{Name: "ratio-2", Class: e.Class + "-r2", Size: fmt.Sprintf("%dMi", size/mib)})
	_, pv := e.WaitBound(lent.Name)
	if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.Value() != size {
		t.Errorf("the claim of ratio 2 got %s, want %d MiB", got.String(), size/mib)
	}
}
