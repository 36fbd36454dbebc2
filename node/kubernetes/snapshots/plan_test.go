package snapshots

import (
	"testing"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPlanFor: the snapshot protocol's rules, one content state at a
// time; above all, nothing is deleted but the snapshot the content names,
// and nothing while a snapshot is being made for it.
func TestPlanFor(t *testing.T) {
	const uid = "5b1f0a5e-0000-4000-8000-000000000001"
	vol, handle, made, other := "pvc-1", "snapshot-static", SnapshotName(uid), "snapshot-other"
	yes, no := true, false
	now := metav1.Now()
	type c = crdv1.VolumeSnapshotContent
	dynamic := func(policy crdv1.DeletionPolicy, ready *bool, recorded *string, deleted bool, ann ...string) *c {
		x := &c{Spec: crdv1.VolumeSnapshotContentSpec{DeletionPolicy: policy,
			Source: crdv1.VolumeSnapshotContentSource{VolumeHandle: &vol}}}
		x.Spec.VolumeSnapshotRef.UID = uid
		if ready != nil || recorded != nil {
			x.Status = &crdv1.VolumeSnapshotContentStatus{ReadyToUse: ready, SnapshotHandle: recorded}
		}
		if deleted {
			x.DeletionTimestamp = &now
		}
		x.Annotations = map[string]string{}
		for _, a := range ann {
			x.Annotations[a] = "yes"
		}
		return x
	}
	static := func(bound, deleted bool) *c {
		x := &c{Spec: crdv1.VolumeSnapshotContentSpec{DeletionPolicy: crdv1.VolumeSnapshotContentDelete,
			Source: crdv1.VolumeSnapshotContentSource{SnapshotHandle: &handle}}}
		if bound {
			x.Spec.VolumeSnapshotRef.UID = uid
		}
		if deleted {
			x.DeletionTimestamp = &now
		}
		x.Status = &crdv1.VolumeSnapshotContentStatus{ReadyToUse: &yes, SnapshotHandle: &handle}
		return x
	}
	const del, retain = crdv1.VolumeSnapshotContentDelete, crdv1.VolumeSnapshotContentRetain
	for _, tc := range []struct {
		name    string
		content *c
		want    step
		remove  string
		refused bool
	}{
		{"new dynamic content", dynamic(del, nil, nil, false), create, "", false},
		{"failed dynamic content", dynamic(del, &no, nil, false), create, "", false},
		{"ready", dynamic(del, &yes, &made, false), idle, "", false},
		{"ready, mark left", dynamic(del, &yes, &made, false, AnnBeingCreated), settle, "", false},
		{"deleted by hand while its snapshot lives", dynamic(del, &yes, &made, true), idle, "", false},
		{"released, Delete", dynamic(del, &yes, &made, true, AnnBeingDeleted), release, made, false},
		{"released, Retain", dynamic(retain, &yes, &made, true, AnnBeingDeleted), release, "", false},
		{"released, nothing recorded", dynamic(del, nil, nil, true, AnnBeingDeleted), release, "", false},
		{"released while being made", dynamic(del, nil, nil, true, AnnBeingDeleted, AnnBeingCreated), create, "", false},
		{"released, another snapshot recorded", dynamic(del, &yes, &other, true, AnnBeingDeleted), release, "", true},
		{"pre-provisioned, unchecked", func() *c { x := static(false, false); x.Status = nil; return x }(), check, "", false},
		{"pre-provisioned, unbound, deleted", static(false, true), release, handle, false},
		{"pre-provisioned, bound, deleted by hand", static(true, true), idle, "", false},
		{"no source", &c{}, idle, "", false},
	} {
		p := planFor(tc.content)
		if p.step != tc.want || p.remove != tc.remove || (p.refusal != "") != tc.refused {
			t.Errorf("%s: plan %+v, want step %d, remove %q, refused %v", tc.name, p, tc.want, tc.remove, tc.refused)
		}
	}
}
