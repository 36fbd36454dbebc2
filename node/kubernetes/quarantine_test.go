package kubernetes_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/provisioner"
	"source.plinth.dev/test/controllertest"
)

// orphanGrace is the orphan grace period of these tests' nodes: short, so
// that a wrong removal would happen well within the test.
const orphanGrace = 2 * time.Second

// TestEtcdRestoreLosesNoData: the cluster's etcd is restored from a
// backup taken before a claim was made, as an operator does it (an
// etcdctl snapshot of the running etcd, restored with etcdutl into a
// fresh data directory while the control plane is stopped). Restarted,
// the node finds that claim's volume without PV or claim: it moves it
// into quarantine, data untouched, and keeps the volume of the PV the
// backup holds, serving the data written to it after the backup. When
// the lost PV is made again (a later backup of it applied), its data
// comes back.
func TestEtcdRestoreLosesNoData(t *testing.T) {
	cp := controllertest.NewControlPlane(t)
	e := controllertest.NewEnvOn(t, cp, true)
	ctx := context.Background()
	e.CreateNode(e.Node, e.Node)
	p := e.NodeProcess(t, "--orphan-grace-period="+orphanGrace.String(), "--orphan-retention=1h")
	p.Run()

	_, kept := e.WaitBound(e.CreateClaim(controllertest.Claim{Name: "in-backup"}).Name)
	waitRecorded(t, e, kept.Name)
	writeData(t, e.Dir, "volumes", kept.Name, "written before the backup")
	backup := filepath.Join(t.TempDir(), "etcd.snapshot")
	if err := cp.SaveEtcdSnapshot(ctx, backup); err != nil {
		t.Fatal(err)
	}
	_, lost := e.WaitBound(e.CreateClaim(controllertest.Claim{Name: "after-backup"}).Name)
	waitRecorded(t, e, lost.Name)
	writeData(t, e.Dir, "volumes", lost.Name, "written to a PV the backup does not hold")
	writeData(t, e.Dir, "volumes", kept.Name, "written after the backup")

	p.Kill(syscall.SIGTERM)
	if err := cp.RestoreEtcdSnapshot(ctx, backup); err != nil {
		t.Fatal(err)
	}
	p.Start()

	// The volume of the PV the backup lacks leaves the volumes directory
	// (after the grace period) ...
	controllertest.Eventually(t, 60*time.Second, "volume "+lost.Name+" acted on", func() (bool, error) {
		_, err := os.Lstat(filepath.Join(e.Dir, "volumes", lost.Name))
		return os.IsNotExist(err), nil
	})
	// ... into quarantine, whole.
	checkData(t, e.Dir, "quarantine", lost.Name, "written to a PV the backup does not hold")
	ev := e.WaitEvent(types.UID(e.Node), provisioner.ReasonOrphanQuarantined, lost.Name)
	t.Logf("Event: %s", ev.Message)

	// The restored PV's volume stays, with everything written to it.
	time.Sleep(3 * orphanGrace) // let a wrong removal happen
	checkData(t, e.Dir, "volumes", kept.Name, "written after the backup")
	if pv, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, kept.Name, metav1.GetOptions{}); err != nil || pv.Status.Phase != corev1.VolumeBound {
		t.Errorf("restored PV %s: %v (%v), want Bound", kept.Name, pvPhase(pv), err)
	}

	// The lost PV is applied again from a later backup: its data is back.
	again := lost.DeepCopy()
	again.ObjectMeta = metav1.ObjectMeta{Name: lost.Name, Labels: lost.Labels, Annotations: lost.Annotations}
	again.Spec.ClaimRef = nil
	again.Status = corev1.PersistentVolumeStatus{}
	if _, err := e.Client.CoreV1().PersistentVolumes().Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 60*time.Second, "volume "+lost.Name+" back from quarantine", func() (bool, error) {
		_, err := os.Lstat(filepath.Join(e.Dir, "volumes", lost.Name))
		return err == nil, nil
	})
	checkData(t, e.Dir, "volumes", lost.Name, "written to a PV the backup does not hold")
	e.WaitEvent(types.UID(e.Node), provisioner.ReasonOrphanRestored, lost.Name)
	if ents, err := os.ReadDir(filepath.Join(e.Dir, "quarantine")); err != nil || len(ents) != 0 {
		t.Errorf("quarantine after the restore: %d entries (%v), want none", len(ents), err)
	}
}

// TestOtherClusterDeletesNothing: a node whose volumes were made in one
// cluster, pointed at another (its kubeconfig changed, or the cluster was
// rebuilt), finds none of their PVs there. It removes and quarantines
// none of them, says so in a Warning Event on its Node, and goes on
// provisioning.
func TestOtherClusterDeletesNothing(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	e.CreateNode(e.Node, e.Node)
	p := e.NodeProcess(t, "--orphan-grace-period="+orphanGrace.String())
	p.Run()
	_, pv := e.WaitBound(e.CreateClaim(controllertest.Claim{Name: "first"}).Name)
	writeData(t, e.Dir, "volumes", pv.Name, "of the first cluster")
	waitRecorded(t, e, pv.Name)
	p.Kill(syscall.SIGTERM)

	other := controllertest.NewEnvOn(t, controllertest.NewControlPlane(t), true)
	other.Node, other.Dir, other.Vols = e.Node, e.Dir, e.Vols
	other.CreateNode(e.Node, e.Node)
	q := other.NodeProcess(t, "--orphan-grace-period="+orphanGrace.String())
	q.Run()
	time.Sleep(4 * orphanGrace) // let a wrong removal happen
	checkData(t, e.Dir, "volumes", pv.Name, "of the first cluster")
	if ents, err := os.ReadDir(filepath.Join(e.Dir, "quarantine")); err != nil || len(ents) != 0 {
		t.Errorf("quarantine: %d entries (%v), want none", len(ents), err)
	}
	ev := other.WaitEvent(types.UID(e.Node), provisioner.ReasonOtherCluster, "")
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "removes and quarantines none") {
		t.Errorf("%s Event: %s %q", provisioner.ReasonOtherCluster, ev.Type, ev.Message)
	}
	// Once, not once per sweep.
	time.Sleep(2 * orphanGrace)
	n := 0
	for _, ev := range other.Events(types.UID(e.Node)) {
		if ev.Reason == provisioner.ReasonOtherCluster {
			n += int(max(ev.Count, 1))
		}
	}
	if n != 1 {
		t.Errorf("%d %s Events, want one", n, provisioner.ReasonOtherCluster)
	}
	// And it serves the cluster it is in.
	other.WaitBound(other.CreateClaim(controllertest.Claim{Name: "second"}).Name)
}

// waitRecorded waits until the node recorded the Delete policy of volume
// id's PV, which it does just after binding the claim: a volume without
// the record never had a PV as far as the node knows, and is removed as
// a crash leftover.
func waitRecorded(t *testing.T, e *controllertest.Env, id string) {
	t.Helper()
	controllertest.Eventually(t, 30*time.Second, "policy of "+id+" recorded", func() (bool, error) {
		p, err := e.Vols.ReclaimPolicy(context.Background(), id)
		return p == volume.ReclaimDelete, err
	})
}

func pvPhase(pv *corev1.PersistentVolume) corev1.PersistentVolumePhase {
	if pv == nil {
		return ""
	}
	return pv.Status.Phase
}

// writeData writes what a pod would into a filesystem volume.
func writeData(t *testing.T, dataDir, where, id, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dataDir, where, id, "data"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkData checks that a volume holds the data last written to it.
func checkData(t *testing.T, dataDir, where, id, want string) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(dataDir, where, id, "data"))
	if err != nil || string(got) != want {
		t.Errorf("data of volume %s in %s/: %q, %v; want %q", id, where, got, err, want)
	}
}
