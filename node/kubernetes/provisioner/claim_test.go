package provisioner

import (
	"errors"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
)

const (
	testDriver = "storage.plinth.dev"
	testNode   = "node-a"
	testUID    = "0b9b1a8e-7c2f-4d55-9a3e-1f2e3d4c5b6a"
)

func testClaim(mut ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	class := "local"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: "data", Namespace: "ns", UID: testUID,
			Annotations: map[string]string{ownership.AnnStorageProvisioner: testDriver, ownership.AnnSelectedNode: testNode},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
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

func testClass(mut ...func(*storagev1.StorageClass)) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: testDriver}
	for _, m := range mut {
		m(sc)
	}
	return sc
}

func TestValidateClaim(t *testing.T) {
	block := corev1.PersistentVolumeBlock
	weird := corev1.PersistentVolumeMode("Tape")
	retain := corev1.PersistentVolumeReclaimRetain
	recycle := corev1.PersistentVolumeReclaimRecycle
	size := func(s string) func(*corev1.PersistentVolumeClaim) {
		return func(p *corev1.PersistentVolumeClaim) {
			p.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(s)
		}
	}
	for _, tc := range []struct {
		name    string
		claim   *corev1.PersistentVolumeClaim
		class   *storagev1.StorageClass
		wantErr string // substring; empty: valid
		check   func(*testing.T, *request)
	}{
		{name: "filesystem default", claim: testClaim(), class: testClass(), check: func(t *testing.T, r *request) {
			if r.mode != corev1.PersistentVolumeFilesystem || r.bytes != 1<<30 || r.reclaim != corev1.PersistentVolumeReclaimDelete || r.id != "pvc-"+testUID ||
				r.params.RootDirMode != 0o777 {
				t.Errorf("got %+v", r)
			}
		}},
		{name: "rootDirMode 0770", claim: testClaim(), class: rootDirClass("0770"), check: func(t *testing.T, r *request) {
			if r.params.RootDirMode != 0o770 {
				t.Errorf("rootDirMode = %04o, want 0770", r.params.RootDirMode)
			}
		}},
		{name: "rootDirMode without leading zero", claim: testClaim(), class: rootDirClass("750"), check: func(t *testing.T, r *request) {
			if r.params.RootDirMode != 0o750 {
				t.Errorf("rootDirMode = %04o, want 0750", r.params.RootDirMode)
			}
		}},
		{name: "rootDirMode of a block claim", claim: testClaim(func(p *corev1.PersistentVolumeClaim) { p.Spec.VolumeMode = &block }),
			class: rootDirClass("0770"), check: func(t *testing.T, r *request) {
				if r.mode != block || r.params.VolumeAttributes(r.volumeMode()) != nil {
					t.Errorf("got %+v, want a block request that records no root directory mode", r)
				}
			}},
		{name: "rootDirMode setgid", claim: testClaim(), class: rootDirClass("2770"), wantErr: `parameter rootDirMode: invalid volume request: root directory mode "2770"`},
		{name: "rootDirMode sticky", claim: testClaim(), class: rootDirClass("1777"), wantErr: `root directory mode "1777"`},
		{name: "rootDirMode not octal", claim: testClaim(), class: rootDirClass("0o770"), wantErr: `root directory mode "0o770"`},
		{name: "rootDirMode symbolic", claim: testClaim(), class: rootDirClass("u=rwx"), wantErr: `root directory mode "u=rwx"`},
		{name: "rootDirMode empty", claim: testClaim(), class: rootDirClass(""), wantErr: `root directory mode ""`},
		{name: "rootDirMode bad for block claims too", claim: testClaim(func(p *corev1.PersistentVolumeClaim) { p.Spec.VolumeMode = &block }),
			class: rootDirClass("0999"), wantErr: `root directory mode "0999"`},
		{name: "block retain RWOP", claim: testClaim(func(p *corev1.PersistentVolumeClaim) {
			p.Spec.VolumeMode = &block
			p.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
		}), class: testClass(func(s *storagev1.StorageClass) { s.ReclaimPolicy = &retain }), check: func(t *testing.T, r *request) {
			if r.mode != block || r.reclaim != retain {
				t.Errorf("got %+v", r)
			}
		}},
		{name: "fractional bytes round up", claim: testClaim(size("1500m")), class: testClass(), check: func(t *testing.T, r *request) {
			if r.bytes != 2 {
				t.Errorf("bytes = %d, want 2", r.bytes)
			}
		}},
		{name: "zero size", claim: testClaim(size("0")), class: testClass(), wantErr: "not positive"},
		{name: "negative size", claim: testClaim(size("-1Gi")), class: testClass(), wantErr: "not positive"},
		{name: "2^63 bytes", claim: testClaim(size("9223372036854775808")), class: testClass(), wantErr: "over the maximum"},
		{name: "exabytes", claim: testClaim(size("100Ei")), class: testClass(), wantErr: "over the maximum"},
		{name: "no request", claim: testClaim(func(p *corev1.PersistentVolumeClaim) { p.Spec.Resources.Requests = nil }), class: testClass(), wantErr: "no storage request"},
		{name: "unknown mode", claim: testClaim(func(p *corev1.PersistentVolumeClaim) { p.Spec.VolumeMode = &weird }), class: testClass(), wantErr: `unknown volume mode "Tape"`},
		{name: "RWX", claim: testClaim(func(p *corev1.PersistentVolumeClaim) {
			p.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteMany}
		}), class: testClass(), wantErr: `access mode "ReadWriteMany"`},
		{name: "ROX", claim: testClaim(func(p *corev1.PersistentVolumeClaim) {
			p.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}
		}), class: testClass(), wantErr: `access mode "ReadOnlyMany"`},
		{name: "no access modes", claim: testClaim(func(p *corev1.PersistentVolumeClaim) { p.Spec.AccessModes = nil }), class: testClass(), wantErr: "no access mode"},
		{name: "unknown parameters", claim: testClaim(), class: testClass(func(s *storagev1.StorageClass) {
			s.Parameters = map[string]string{"zeta": "1", "fsType": "ext4"}
		}), wantErr: "unknown parameters fsType, zeta; storage.plinth.dev supports only overcommit, rootDirMode"},
		{name: "over-commit below 1", claim: testClaim(), class: testClass(func(s *storagev1.StorageClass) {
			s.Parameters = map[string]string{"overcommit": "0.5"}
		}), wantErr: `parameter overcommit: invalid volume request: over-commit ratio "0.5"`},
		{name: "class of other driver", claim: testClaim(), class: testClass(func(s *storagev1.StorageClass) { s.Provisioner = "x" }), wantErr: "belongs to provisioner"},
		{name: "recycle", claim: testClaim(), class: testClass(func(s *storagev1.StorageClass) { s.ReclaimPolicy = &recycle }), wantErr: "reclaim policy"},
		{name: "selector", claim: testClaim(func(p *corev1.PersistentVolumeClaim) { p.Spec.Selector = &metav1.LabelSelector{} }), class: testClass(), wantErr: "selector"},
		{name: "populator", claim: testClaim(func(p *corev1.PersistentVolumeClaim) {
			group := "example.com"
			p.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "Widget", Name: "x"}
		}), class: testClass(), wantErr: "volume populators are not supported"},
		{name: "source of another namespace", claim: testClaim(func(p *corev1.PersistentVolumeClaim) {
			other := "other"
			p.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "x", Namespace: &other}
		}), class: testClass(), wantErr: "only sources of the claim's own namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := validateClaim(tc.claim, tc.class, testDriver)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errInvalidClaim) {
					t.Fatalf("err = %v, want errInvalidClaim containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}

// rootDirClass is a class with parameter rootDirMode set to mode.
func rootDirClass(mode string) *storagev1.StorageClass {
	return testClass(func(s *storagev1.StorageClass) { s.Parameters = map[string]string{"rootDirMode": mode} })
}

// TestBuildPVRecordsRootDirMode: the PV of a filesystem volume says the
// mode its root directory was made with, the default included, so the
// volume can be made again from the PV alone; a block PV says nothing.
func TestBuildPVRecordsRootDirMode(t *testing.T) {
	block := corev1.PersistentVolumeBlock
	for _, tc := range []struct {
		name  string
		claim *corev1.PersistentVolumeClaim
		class *storagev1.StorageClass
		want  map[string]string
	}{
		{"default", testClaim(), testClass(), map[string]string{"rootDirMode": "0777"}},
		{"0770", testClaim(), rootDirClass("0770"), map[string]string{"rootDirMode": "0770"}},
		{"750", testClaim(), rootDirClass("750"), map[string]string{"rootDirMode": "0750"}},
		{"block", testClaim(func(p *corev1.PersistentVolumeClaim) { p.Spec.VolumeMode = &block }), rootDirClass("0770"), nil},
	} {
		r, err := validateClaim(tc.claim, tc.class, testDriver)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := buildPV(tc.claim, r, testDriver, "host-a", "x").Spec.CSI.VolumeAttributes; !maps.Equal(got, tc.want) {
			t.Errorf("%s: volume attributes %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBuildPVIsOwned(t *testing.T) {
	pvc := testClaim()
	r, err := validateClaim(pvc, testClass(), testDriver)
	if err != nil {
		t.Fatal(err)
	}
	pv := buildPV(pvc, r, testDriver, "host-a", testNode)
	if pv.Name != "pvc-"+testUID || pv.Spec.CSI.VolumeHandle != pv.Name || pv.Spec.ClaimRef.UID != testUID ||
		pv.Annotations[ownership.AnnProvisionedBy] != testDriver || *pv.Spec.VolumeMode != corev1.PersistentVolumeFilesystem ||
		pv.Labels[ownership.LabelNode] != ownership.NodeLabelValue(testNode) || pv.Annotations[ownership.AnnNodeName] != testNode {
		t.Errorf("unexpected PV %+v", pv)
	}
	if ok, why := ownership.OwnsVolume(pv, testDriver, "host-a"); !ok {
		t.Errorf("own PV not owned: %s", why)
	}
	for name, mut := range map[string]func(*corev1.PersistentVolume){
		"other host": func(p *corev1.PersistentVolume) {
			p.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0] = "host-b"
		},
		"no affinity":       func(p *corev1.PersistentVolume) { p.Spec.NodeAffinity = nil },
		"empty terms":       func(p *corev1.PersistentVolume) { p.Spec.NodeAffinity.Required.NodeSelectorTerms = nil },
		"no required":       func(p *corev1.PersistentVolume) { p.Spec.NodeAffinity.Required = nil },
		"other driver":      func(p *corev1.PersistentVolume) { p.Spec.CSI.Driver = "other" },
		"not CSI":           func(p *corev1.PersistentVolume) { p.Spec.CSI = nil },
		"handle mismatch":   func(p *corev1.PersistentVolume) { p.Spec.CSI.VolumeHandle = "pvc-" + strings.Repeat("0", 36) },
		"no provisioned-by": func(p *corev1.PersistentVolume) { p.Annotations = nil },
		"foreign handle": func(p *corev1.PersistentVolume) {
			p.Name = "../../etc"
			p.Spec.CSI.VolumeHandle = "../../etc"
		},
	} {
		p := buildPV(pvc, r, testDriver, "host-a", "x")
		mut(p)
		if ok, _ := ownership.OwnsVolume(p, testDriver, "host-a"); ok {
			t.Errorf("%s: PV considered ours", name)
		}
	}
}

// TestRecordedPolicy: only our own Delete PV records Delete; every other PV
// naming one of our volumes records Retain, and PVs naming none record
// nothing.
func TestRecordedPolicy(t *testing.T) {
	pvc := testClaim()
	r, err := validateClaim(pvc, testClass(), testDriver)
	if err != nil {
		t.Fatal(err)
	}
	id := "pvc-" + testUID
	for _, tc := range []struct {
		name   string
		mut    func(*corev1.PersistentVolume)
		want   volume.ReclaimPolicy
		wantOK bool
	}{
		{name: "own Delete", mut: func(*corev1.PersistentVolume) {}, want: volume.ReclaimDelete, wantOK: true},
		{name: "own Retain", mut: func(p *corev1.PersistentVolume) {
			p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
		}, want: volume.ReclaimRetain, wantOK: true},
		{name: "own Recycle", mut: func(p *corev1.PersistentVolume) {
			p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRecycle
		}, want: volume.ReclaimRetain, wantOK: true},
		{name: "unknown policy", mut: func(p *corev1.PersistentVolume) {
			p.Spec.PersistentVolumeReclaimPolicy = "Shred"
		}, want: volume.ReclaimRetain, wantOK: true},
		{name: "hand-made Delete PV", mut: func(p *corev1.PersistentVolume) { p.Annotations = nil }, want: volume.ReclaimRetain, wantOK: true},
		{name: "Delete PV for another host", mut: func(p *corev1.PersistentVolume) {
			p.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0] = "host-b"
		}, want: volume.ReclaimRetain, wantOK: true},
		{name: "other driver", mut: func(p *corev1.PersistentVolume) { p.Spec.CSI.Driver = "other" }},
		{name: "not CSI", mut: func(p *corev1.PersistentVolume) { p.Spec.CSI = nil }},
		{name: "foreign handle", mut: func(p *corev1.PersistentVolume) { p.Spec.CSI.VolumeHandle = "../../etc" }},
	} {
		p := buildPV(pvc, r, testDriver, "host-a", "x")
		tc.mut(p)
		gotID, got, ok := recordedPolicy(p, testDriver, "host-a")
		if ok != tc.wantOK || got != tc.want || (ok && gotID != id) {
			t.Errorf("%s: recordedPolicy = %q, %q, %v; want %q, %q, %v", tc.name, gotID, got, ok, id, tc.want, tc.wantOK)
		}
	}
}
