package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/names"
)

// TestCloneHasItsSourcesData: a user clones a claim in use (a claim whose
// dataSource is that claim) at a larger size, and a pod of the clone
// reads, from inside its container, the file the source's pod wrote; its
// PV has the clone's size, and its writes do not reach the source (a
// second pod of the source, beside the first, reads the file unchanged).
func TestCloneHasItsSourcesData(t *testing.T) {
	t.Parallel()
	c := clusterFor(t)
	ctx := t.Context()
	const src, clone = "e2e-clone-src", "e2e-clone"
	pvc := createClaim(t, c, src, corev1.PersistentVolumeFilesystem, "16Mi")
	writer := busyboxPod(src+"-writer", "echo from-the-source > /data/file && sync && echo written && sleep 3600")
	mountClaim(writer, src, false)
	runPod(t, c, writer, pvc)
	podLogs(t, c, writer.Name, "written")

	fs := corev1.PersistentVolumeFilesystem
	cl := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: clone},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       &fs,
			StorageClassName: ptr(names.StorageClassName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("32Mi")}},
			DataSource:       &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: src},
		},
	}
	made, err := c.Client.CoreV1().PersistentVolumeClaims("default").Create(ctx, cl, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), clone, metav1.DeleteOptions{})
	})
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
