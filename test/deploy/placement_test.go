package deploy

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/launch"
)

// testPlacerInForce: deploy/'s admission Deployment places a claim of an
// Immediate class on the node, with the rights deploy/ gives it (its
// replicas elect the placer with a Lease in plinth-system, which one of
// them holds), and the node provisions it: Bound before any pod uses it.
func testPlacerInForce(t *testing.T, c *launch.Cluster) {
	ctx := context.Background()
	immediate := storagev1.VolumeBindingImmediate
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "deploy-immediate"},
		Provisioner: names.DriverName, VolumeBindingMode: &immediate}
	if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	block := corev1.PersistentVolumeBlock
	claim, err := c.Client.CoreV1().PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "placed-by-the-placer"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
			StorageClassName: &class.Name,
			VolumeMode:       &block,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().PersistentVolumeClaims("default").Delete(ctx, claim.Name, metav1.DeleteOptions{})
		_ = c.Client.StorageV1().StorageClasses().Delete(ctx, class.Name, metav1.DeleteOptions{})
	})
	poll(t, 2*time.Minute, "the Immediate claim placed and Bound", func(ctx context.Context) (bool, error) {
		live, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node := live.Annotations["volume.kubernetes.io/selected-node"]
		if node != "" && node != c.NodeName {
			t.Fatalf("the Immediate claim is placed on %q; the cluster's one node is %s", node, c.NodeName)
		}
		return node == c.NodeName && live.Status.Phase == corev1.ClaimBound, fmt.Errorf("placed on %q, %s", node, live.Status.Phase)
	})
	lease, err := c.Client.CoordinationV1().Leases("plinth-system").Get(ctx, clusterobjects.PlacerLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the placer's Lease: %v", err)
	}
	// The identity is the host's name and a random suffix: the node's
	// name here, where the test gives the Deployment the host network.
	if h := lease.Spec.HolderIdentity; h == nil || *h == "" || lease.Spec.RenewTime == nil {
		t.Fatalf("the placer's Lease has no holder: %+v", lease.Spec)
	}
	t.Logf("deploy/'s placer (Lease held by %s) placed and the node bound claim %s", *lease.Spec.HolderIdentity, claim.Name)
}
