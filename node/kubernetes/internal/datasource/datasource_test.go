package datasource

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestCheckCopiesSnapshotsAndClaimsOfTheNamespace: the kinds Plinth
// copies are a VolumeSnapshot and a claim, by dataSource or by
// dataSourceRef (which wins), of the claim's own namespace; a populator's
// kind, or any source of another namespace, is ErrUnusable.
func TestCheckCopiesSnapshotsAndClaimsOfTheNamespace(t *testing.T) {
	snapshots, core, other, own, example := "snapshot.storage.k8s.io", "", "other", "ns", "example.com"
	for _, tc := range []struct {
		name string
		src  *corev1.TypedLocalObjectReference
		ref  *corev1.TypedObjectReference
		ok   bool
	}{
		{name: "none", ok: true},
		{name: "snapshot", src: &corev1.TypedLocalObjectReference{APIGroup: &snapshots, Kind: "VolumeSnapshot", Name: "s"}, ok: true},
		{name: "claim", src: &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "c"}, ok: true},
		{name: "claim, empty group", src: &corev1.TypedLocalObjectReference{APIGroup: &core, Kind: "PersistentVolumeClaim", Name: "c"}, ok: true},
		{name: "ref of own namespace", ref: &corev1.TypedObjectReference{APIGroup: &snapshots, Kind: "VolumeSnapshot", Name: "s", Namespace: &own}, ok: true},
		{name: "ref of other namespace", ref: &corev1.TypedObjectReference{APIGroup: &snapshots, Kind: "VolumeSnapshot", Name: "s", Namespace: &other}},
		{name: "snapshot without group", src: &corev1.TypedLocalObjectReference{Kind: "VolumeSnapshot", Name: "s"}},
		{name: "populator", src: &corev1.TypedLocalObjectReference{APIGroup: &example, Kind: "Widget", Name: "w"}},
		{name: "ref wins", src: &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "c"},
			ref: &corev1.TypedObjectReference{APIGroup: &example, Kind: "Widget", Name: "w"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc := &corev1.PersistentVolumeClaim{}
			pvc.Namespace = own
			pvc.Spec.DataSource, pvc.Spec.DataSourceRef = tc.src, tc.ref
			err := Check(pvc)
			if tc.ok && err != nil {
				t.Errorf("Check: %v; want the source accepted", err)
			}
			if !tc.ok && !errors.Is(err, ErrUnusable) {
				t.Errorf("Check: %v; want ErrUnusable", err)
			}
		})
	}
}
