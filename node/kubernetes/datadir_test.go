package kubernetes_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	plinthk8s "source.plinth.dev/node/kubernetes"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/test/controllertest"
)

// TestMain runs the tests against the controller tests' control plane
// (real etcd, kube-apiserver and kube-controller-manager).
func TestMain(m *testing.M) { controllertest.Main(m) }

// TestUnusedDataDirectoryWaits: a node whose volumes exist in the cluster,
// started on a data directory in which no volume was ever made (its data
// disk not mounted, so plinth-node sees the empty directory below the
// mount point), says so in a Warning Event on its Node and makes no
// volume there; once its PVs are gone (an operator who knows their data
// is lost deletes them), it goes on.
func TestUnusedDataDirectoryWaits(t *testing.T) {
	e := controllertest.NewEnv(t, true)
	ctx := context.Background()
	e.CreateNode(e.Node, e.Node)
	p := e.NodeProcess(t)
	p.Start()
	first := e.CreateClaim(controllertest.Claim{Name: "first"})
	_, pv := e.WaitBound(first.Name)
	p.Kill(syscall.SIGTERM)

	unmounted := t.TempDir()
	q := e.NodeProcess(t, "--data-dir="+unmounted)
	q.Start()
	t.Cleanup(func() {
		q.Kill(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("plinth-node log (tail):\n%s", q.LogTail())
		}
	})
	ev := e.WaitEvent(types.UID(e.Node), plinthk8s.ReasonDataDirectoryUnused, pv.Name)
	t.Logf("Event: %s", ev.Message)
	second := e.CreateClaim(controllertest.Claim{Name: "second"})
	// The node would have made it in well under a second (TestRestartStartsClean).
	time.Sleep(3 * time.Second)
	if _, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, ownership.VolumeIDFor(second.UID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a PV for claim second exists (or: %v): the node provisioned on a data directory that is not its disk", err)
	}
	if entries, err := os.ReadDir(filepath.Join(unmounted, "volumes")); err != nil || len(entries) != 0 {
		t.Errorf("the unused data directory's volumes: %d entries (%v), want none", len(entries), err)
	}

	// Their data lost, the operator deletes the claim and its PV.
	if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 60*time.Second, "PV "+pv.Name+" gone", func() (bool, error) {
		_, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	e.WaitBound(second.Name)
}
