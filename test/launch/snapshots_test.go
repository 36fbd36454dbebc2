package launch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"source.plinth.dev/node/kubernetes/names"
)

// TestControlPlaneSnapshotAPI: a control plane started with SnapshotAPI,
// as the VM node's is, serves snapshot.storage.k8s.io once started, and
// its snapshot-controller turns a VolumeSnapshot of a bound claim into a
// VolumeSnapshotContent of the claim's driver and volume handle, labelled
// with the node the volume's affinity names. No node runs here: the Node,
// PV and claim are made by hand, as a static volume would be.
func TestControlPlaneSnapshotAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane (-short)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cp, stop := startTestControlPlane(ctx, t, "plinth-snapapi-", ControlPlaneConfig{SnapshotAPI: true})
	defer stop()
	if cp.PID("snapshot-controller") == 0 {
		t.Fatal("no snapshot-controller runs")
	}
	const node, handle = "snap-node", "snap-volume"
	makeStaticClaim(ctx, t, cp.Cluster, node, handle)

	dyn, err := dynamic.NewForConfig(cp.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	// A user snapshots a claim without making a class: the driver's
	// default one is there.
	def, err := dyn.Resource(schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}).Get(ctx, names.StorageClassName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the default VolumeSnapshotClass: %v", err)
	}
	if d, _, _ := unstructured.NestedString(def.Object, "driver"); d != names.DriverName || def.GetAnnotations()["snapshot.storage.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("VolumeSnapshotClass %s: driver %q, annotations %v; want the default class of %s", def.GetName(), d, def.GetAnnotations(), names.DriverName)
	}
	v1 := func(resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: resource}
	}
	// Created right after the start: the CRDs must be served by now.
	for _, obj := range []struct {
		res dynamic.ResourceInterface
		obj map[string]any
	}{
		{dyn.Resource(v1("volumesnapshotclasses")), map[string]any{
			"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
			"metadata": map[string]any{"name": "snap"}, "driver": names.DriverName, "deletionPolicy": "Retain",
		}},
		{dyn.Resource(v1("volumesnapshots")).Namespace("default"), map[string]any{
			"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
			"metadata": map[string]any{"name": "snap"},
			"spec": map[string]any{
				"volumeSnapshotClassName": "snap",
				"source":                  map[string]any{"persistentVolumeClaimName": "snap"},
			},
		}},
	} {
		if _, err := obj.res.Create(ctx, &unstructured.Unstructured{Object: obj.obj}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s: %v", obj.obj["kind"], err)
		}
	}
	var content *unstructured.Unstructured
	if err := cp.waitFor(ctx, "a VolumeSnapshotContent", 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		list, err := dyn.Resource(v1("volumesnapshotcontents")).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			return false, err
		}
		content = &list.Items[0]
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"spec.driver":                 names.DriverName,
		"spec.source.volumeHandle":    handle,
		"spec.volumeSnapshotRef.name": "snap",
	} {
		if got, _, _ := unstructured.NestedString(content.Object, strings.Split(path, ".")...); got != want {
			t.Errorf("content %s: %s is %q, want %q", content.GetName(), path, got, want)
		}
	}
	if got := content.GetLabels()["snapshot.storage.kubernetes.io/managed-by"]; got != node {
		t.Errorf("content %s: labels %v, want managed-by %s", content.GetName(), content.GetLabels(), node)
	}
}

// makeStaticClaim creates a Node, a PV of Plinth's driver on it, and a
// claim bound to the PV, and waits until the controller manager has bound
// them.
func makeStaticClaim(ctx context.Context, t *testing.T, c *Cluster, node, handle string) {
	t.Helper()
	fs := corev1.PersistentVolumeFilesystem
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{corev1.LabelHostname: node}}}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: handle},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       &fs,
			ClaimRef:         &corev1.ObjectReference{Namespace: "default", Name: "snap"},
			StorageClassName: "",
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: names.DriverName, VolumeHandle: handle},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       &fs,
			VolumeName:       handle,
			StorageClassName: new(string),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Node: %v", err)
	}
	if _, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PV: %v", err)
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating claim: %v", err)
	}
	if err := c.waitFor(ctx, "claim snap Bound", 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "snap", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.Status.Phase == corev1.ClaimBound, fmt.Errorf("claim is %s", got.Status.Phase)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestReadCRDRefusesOtherObjects: the crd/ directory applied to every
// cluster holds CustomResourceDefinitions only; anything else there (a
// wrong file copied by build.sh) fails the launch with its name, rather
// than being applied with an admin's rights.
func TestReadCRDRefusesOtherObjects(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"crd.yaml":  "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: volumesnapshots.snapshot.storage.k8s.io\n",
		"role.yaml": "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: everything\n",
		"bad.yaml":  "kind: [\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if crd, err := readCRD(filepath.Join(dir, "crd.yaml")); err != nil || crd.GetName() != "volumesnapshots.snapshot.storage.k8s.io" {
		t.Errorf("readCRD(crd.yaml) = %v, %v; want the CRD", crd, err)
	}
	for _, name := range []string{"role.yaml", "bad.yaml"} {
		if _, err := readCRD(filepath.Join(dir, name)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("readCRD(%s) = %v, want an error naming the file", name, err)
		}
	}
}

func TestCRDEstablished(t *testing.T) {
	crd := func(conds ...any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": conds}}}
	}
	for _, tc := range []struct {
		crd  *unstructured.Unstructured
		want bool
	}{
		{&unstructured.Unstructured{Object: map[string]any{}}, false},
		{crd(map[string]any{"type": "NamesAccepted", "status": "True"}), false},
		{crd(map[string]any{"type": "Established", "status": "False"}), false},
		{crd(map[string]any{"type": "NamesAccepted", "status": "True"}, map[string]any{"type": "Established", "status": "True"}), true},
	} {
		if got := crdEstablished(tc.crd); got != tc.want {
			t.Errorf("crdEstablished(%v) = %v, want %v", tc.crd.Object, got, tc.want)
		}
	}
}
