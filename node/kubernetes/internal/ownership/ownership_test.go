package ownership

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	testDriver = "storage.plinth.dev"
	testNode   = "node-a"
	testUID    = "0b9b1a8e-7c2f-4d55-9a3e-1f2e3d4c5b6a"
)

func testClaim(mut ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: "data", Namespace: "ns", UID: testUID,
			Annotations: map[string]string{AnnStorageProvisioner: testDriver, AnnSelectedNode: testNode},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Gi"),
			}},
		},
	}
	for _, m := range mut {
		m(pvc)
	}
	return pvc
}

func TestOwnsClaim(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want bool
	}{
		{"ga annotation", map[string]string{AnnStorageProvisioner: testDriver, AnnSelectedNode: testNode}, true},
		{"beta fallback", map[string]string{AnnBetaStorageProvisioner: testDriver, AnnSelectedNode: testNode}, true},
		{"ga wins over beta", map[string]string{AnnStorageProvisioner: "other", AnnBetaStorageProvisioner: testDriver, AnnSelectedNode: testNode}, false},
		{"other node", map[string]string{AnnStorageProvisioner: testDriver, AnnSelectedNode: "node-b"}, false},
		{"not selected yet", map[string]string{AnnStorageProvisioner: testDriver}, false},
		{"other driver", map[string]string{AnnStorageProvisioner: "ebs.csi.aws.com", AnnSelectedNode: testNode}, false},
		{"no annotations", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc := testClaim(func(p *corev1.PersistentVolumeClaim) { p.Annotations = tc.ann })
			if got := OwnsClaim(pvc, testDriver, testNode); got != tc.want {
				t.Errorf("OwnsClaim = %v, want %v", got, tc.want)
			}
		})
	}
	if OwnsClaim(nil, testDriver, testNode) {
		t.Error("OwnsClaim(nil) = true")
	}
}

func TestClaimUIDOf(t *testing.T) {
	for id, ok := range map[string]bool{
		"pvc-" + testUID:                  true,
		testUID:                           false,
		"pvc-" + strings.ToUpper(testUID): false,
		"pvc-" + testUID + "x":            false,
		"pvc-../" + testUID[3:]:           false,
		"pvc-":                            false,
		"":                                false,
		"pvc-0b9b1a8e_7c2f-4d55-9a3e-1f2e3d4c5b6a": false,
	} {
		if _, got := ClaimUIDOf(id); got != ok {
			t.Errorf("ClaimUIDOf(%q) ok = %v, want %v", id, got, ok)
		}
	}
	if uid, _ := ClaimUIDOf(VolumeIDFor(testUID)); uid != testUID {
		t.Errorf("round trip gave %q", uid)
	}
}

func TestClaimTransform(t *testing.T) {
	tf := ClaimTransform(testDriver, testNode)
	own := testClaim()
	own.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	got, _ := tf(own)
	if g := got.(*corev1.PersistentVolumeClaim); g.ManagedFields != nil || g.Spec.Resources.Requests == nil {
		t.Errorf("own claim: managed fields kept or spec lost: %+v", g)
	}
	foreign := testClaim(func(p *corev1.PersistentVolumeClaim) {
		p.Annotations[AnnSelectedNode] = "node-b"
		p.ResourceVersion = "7"
	})
	got, _ = tf(foreign)
	g, ok := got.(*metav1.PartialObjectMetadata)
	if !ok || g.Annotations != nil || g.UID != "" || g.Name != "data" || g.Namespace != "ns" {
		t.Errorf("foreign claim not reduced to a stub: %#v", got)
	}
	if keys, _ := IndexByUID(g); keys != nil {
		t.Errorf("stub indexed by UID: %v", keys)
	}
	// A claim of our driver that no node was chosen for is no node's
	// (the scheduler or the placer chooses), nor is one of another
	// driver.
	unplaced := testClaim(func(p *corev1.PersistentVolumeClaim) { delete(p.Annotations, AnnSelectedNode) })
	if _, ok := mustTransform(tf, unplaced).(*metav1.PartialObjectMetadata); !ok {
		t.Errorf("unplaced claim of our driver kept whole")
	}
	other := testClaim(func(p *corev1.PersistentVolumeClaim) {
		delete(p.Annotations, AnnSelectedNode)
		p.Annotations[AnnStorageProvisioner] = "other.example.com"
	})
	if _, ok := mustTransform(tf, other).(*metav1.PartialObjectMetadata); !ok {
		t.Errorf("unplaced claim of another driver kept whole")
	}
}

func mustTransform(tf func(any) (any, error), obj any) any {
	out, _ := tf(obj)
	return out
}

func TestClaimUnplaced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*corev1.PersistentVolumeClaim)
		want   bool
	}{
		{"placed", func(*corev1.PersistentVolumeClaim) {}, false},
		{"unplaced", func(p *corev1.PersistentVolumeClaim) { delete(p.Annotations, AnnSelectedNode) }, true},
		{"bound", func(p *corev1.PersistentVolumeClaim) {
			delete(p.Annotations, AnnSelectedNode)
			p.Spec.VolumeName = "pv"
		}, false},
		{"deleting", func(p *corev1.PersistentVolumeClaim) {
			delete(p.Annotations, AnnSelectedNode)
			p.DeletionTimestamp = &metav1.Time{}
		}, false},
		{"no provisioner yet", func(p *corev1.PersistentVolumeClaim) { p.Annotations = nil }, false},
	} {
		if got := ClaimUnplaced(testClaim(tc.change), testDriver); got != tc.want {
			t.Errorf("%s: ClaimUnplaced = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNodeLabelValue(t *testing.T) {
	if v := NodeLabelValue("node-a"); v != "node-a" {
		t.Errorf("short name changed to %q", v)
	}
	long := strings.Repeat("a", 70) + ".example.com"
	v := NodeLabelValue(long)
	if len(v) > 63 || v != NodeLabelValue(long) || v == NodeLabelValue(long+"x") {
		t.Errorf("long name label %q not short, stable and distinct", v)
	}
}

func TestNodeNameOfLabel(t *testing.T) {
	if n, ok := NodeNameOfLabel(NodeLabelValue("node-a")); !ok || n != "node-a" {
		t.Errorf("NodeNameOfLabel of a short name's label = %q, %v", n, ok)
	}
	long := strings.Repeat("n", 100)
	if n, ok := NodeNameOfLabel(NodeLabelValue(long)); ok {
		t.Errorf("NodeNameOfLabel of a hashed label = %q, want not ok", n)
	}
}
