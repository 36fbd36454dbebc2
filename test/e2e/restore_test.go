package e2e

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
)

// TestRestoreHasTheSnapshotsData: a user snapshots a claim in use, its
// pod then changes the file, and a claim restored from the snapshot gives
// a new pod the file as it was when the snapshot was taken.
func TestRestoreHasTheSnapshotsData(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	ctx := t.Context()
	const name = "e2e-restore-src"
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	pvc := createClaim(t, c, name, corev1.PersistentVolumeFilesystem, "16Mi")
	writer := busyboxPod(name+"-writer", "echo before > /data/file && sync && echo written && "+
		"while [ ! -e /data/go ]; do sleep 0.2; done && echo after > /data/file && sync && echo rewritten && sleep 3600")
	mountClaim(writer, name, false)
	runPod(t, c, writer, pvc)
	podLogs(t, c, writer.Name, "written")

	snapshotOf(t, dyn, name, name)
	// The restored claim is made at once: it waits for the snapshot.
	restored := claimFrom(t, c, "e2e-restored", corev1.PersistentVolumeFilesystem, "32Mi", snapshotSource(name))
	waitSnapshotReady(t, ctx, dyn, name)
	// The source changes after the snapshot.
	toucher := busyboxPod(name+"-go", "touch /data/go && sleep 3600")
	mountClaim(toucher, name, false)
	runPod(t, c, toucher, pvc)
	podLogs(t, c, writer.Name, "rewritten")

	reader := busyboxPod("e2e-restored-reader", "echo content=$(cat /data/file) && sleep 3600")
	mountClaim(reader, restored.Name, false)
	pv := runPod(t, c, reader, restored)
	if logs := podLogs(t, c, reader.Name, "content="); !strings.Contains(logs, "content=before") {
		t.Errorf("the restored claim's pod read %q; want the file as the snapshot has it, before", logs)
	}
	if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.Value() != 32<<20 {
		t.Errorf("the restored PV is %s; want the claim's 32Mi", q.String())
	}
}

// TestCloneHasItsSourcesData: a user clones a claim in use (a claim whose
// dataSource is that claim) at a larger size, and a pod of the clone
// reads, from inside its container, the file the source's pod wrote; its
// PV has the clone's size, and its writes do not reach the source (a
// second pod of the source, beside the first, reads the file unchanged).
func TestCloneHasItsSourcesData(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	const src, clone = "e2e-clone-src", "e2e-clone"
	pvc := createClaim(t, c, src, corev1.PersistentVolumeFilesystem, "16Mi")
	writer := busyboxPod(src+"-writer", "echo from-the-source > /data/file && sync && echo written && sleep 3600")
	mountClaim(writer, src, false)
	runPod(t, c, writer, pvc)
	podLogs(t, c, writer.Name, "written")

	made := claimFrom(t, c, clone, corev1.PersistentVolumeFilesystem, "32Mi", &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: src})
	reader := busyboxPod(clone+"-reader", "echo content=$(cat /data/file) && echo changed > /data/file && sync && echo rewritten && sleep 3600")
	mountClaim(reader, clone, false)
	pv := runPod(t, c, reader, made)
	logs := podLogs(t, c, reader.Name, "rewritten")
	if !strings.Contains(logs, "content=from-the-source") {
		t.Errorf("the clone's pod read %q; want the source's file, from-the-source", logs)
	}
	if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.Value() != 32<<20 {
		t.Errorf("the clone's PV is %s; want the claim's 32Mi", q.String())
	}
	// The source is untouched by the clone's write.
	check := busyboxPod(src+"-check", "echo source=$(cat /data/file) && sleep 3600")
	mountClaim(check, src, false)
	runPod(t, c, check, pvc)
	if logs := podLogs(t, c, check.Name, "source="); !strings.Contains(logs, "source=from-the-source") {
		t.Errorf("the source's pod reads %q after the clone was written; want from-the-source", logs)
	}
}
