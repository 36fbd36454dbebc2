package launch

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEtcdSnapshotRestore: a snapshot SaveEtcdSnapshot takes and
// RestoreEtcdSnapshot restores brings the cluster back to the moment of
// the snapshot: an object made before it is there, one made after it is
// gone, and the revision moved past every one handed out before (so no
// watcher from before the restore mistakes new objects for old ones).
func TestEtcdSnapshotRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane (-short)")
	}
	dir, err := os.MkdirTemp("", "plinth-etcdbk-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cfg := ControlPlaneConfig{Dir: dir}
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	cp, err := StartControlPlane(ctx, cfg)
	if err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	defer func() {
		if err := cp.Stop(context.Background()); err != nil {
			t.Errorf("stopping control plane: %v", err)
		}
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("control plane logs kept in %s", cp.LogDir)
		}
	}()
	cms := cp.Client.CoreV1().ConfigMaps(metav1.NamespaceDefault)
	create := func(name string) *corev1.ConfigMap {
		cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	create("before")
	snapshot := filepath.Join(dir, "etcd.snapshot")
	if err := cp.SaveEtcdSnapshot(ctx, snapshot); err != nil {
		t.Fatal(err)
	}
	after := create("after")

	if err := cp.RestoreEtcdSnapshot(ctx, snapshot); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap made before the snapshot: %v", err)
	}
	if _, err := cms.Get(ctx, "after", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap made after the snapshot: %v, want NotFound", err)
	}
	last, _ := strconv.ParseInt(after.ResourceVersion, 10, 64)
	rv, _ := strconv.ParseInt(create("restored").ResourceVersion, 10, 64)
	if rv <= last+restoreRevisionBump/2 {
		t.Errorf("resource version after the restore %d, before it %d: want it moved on by about %d", rv, last, restoreRevisionBump)
	}
}
