package provisioner

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/classparams"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
)

// What a fuzzed claim and class carry beyond their strings (claimInput's
// flags).
const (
	fuzzVolumeMode    = 1 << iota // spec.volumeMode is set
	fuzzReclaim                   // the class sets a reclaim policy
	fuzzOtherDriver               // the class names the fuzzed provisioner, not Plinth's
	fuzzRootDirMode               // the class sets rootDirMode
	fuzzOvercommit                // the class sets overcommit
	fuzzExtraParam                // the class sets one more parameter
	fuzzSelector                  // the claim has a selector
	fuzzDataSource                // the claim has a data source (a volume populator's)
	fuzzDataSourceRef             // the claim has a data source reference (a populator's)
	fuzzNoRequest                 // the claim requests no storage
)

// claimInput is one fuzzed claim and its class, as f.Add takes them.
type claimInput struct {
	flags                   uint16
	size, mode, access      string // access: modes separated by commas
	reclaim, provisioner    string
	rootDirMode, overcommit string
	paramKey, paramValue    string
	annKey, annValue        string
	uid, attributesClass    string
}

func (in claimInput) add(f *testing.F) {
	f.Add(in.flags, in.size, in.mode, in.access, in.reclaim, in.provisioner, in.rootDirMode, in.overcommit,
		in.paramKey, in.paramValue, in.annKey, in.annValue, in.uid, in.attributesClass)
}

// build is the claim and class in, or ok=false when its size is no
// quantity (no API object can hold it).
func (in claimInput) build() (pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, ok bool) {
	pvc = testClaim(func(p *corev1.PersistentVolumeClaim) {
		p.UID = types.UID(in.uid)
		p.Annotations[in.annKey] = in.annValue
		p.Spec.AccessModes = nil
		if in.access != "" {
			for _, m := range strings.Split(in.access, ",") {
				p.Spec.AccessModes = append(p.Spec.AccessModes, corev1.PersistentVolumeAccessMode(m))
			}
		}
		if in.flags&fuzzVolumeMode != 0 {
			m := corev1.PersistentVolumeMode(in.mode)
			p.Spec.VolumeMode = &m
		}
		if in.attributesClass != "" {
			p.Spec.VolumeAttributesClassName = &in.attributesClass
		}
		if in.flags&fuzzSelector != 0 {
			p.Spec.Selector = &metav1.LabelSelector{}
		}
		populator := "example.com"
		if in.flags&fuzzDataSource != 0 {
			p.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &populator, Kind: "Widget", Name: "source"}
		}
		if in.flags&fuzzDataSourceRef != 0 {
			p.Spec.DataSourceRef = &corev1.TypedObjectReference{APIGroup: &populator, Kind: "Widget", Name: "source"}
		}
		if in.flags&fuzzNoRequest != 0 {
			p.Spec.Resources.Requests = nil
		}
	})
	if in.flags&fuzzNoRequest == 0 {
		q, err := resource.ParseQuantity(in.size)
		if err != nil {
			return nil, nil, false
		}
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = q
	}
	class = testClass(func(s *storagev1.StorageClass) {
		if in.flags&fuzzOtherDriver != 0 {
			s.Provisioner = in.provisioner
		}
		if in.flags&fuzzReclaim != 0 {
			p := corev1.PersistentVolumeReclaimPolicy(in.reclaim)
			s.ReclaimPolicy = &p
		}
		params := map[string]string{}
		if in.flags&fuzzRootDirMode != 0 {
			params[names.ParameterRootDirMode] = in.rootDirMode
		}
		if in.flags&fuzzOvercommit != 0 {
			params[names.ParameterOvercommit] = in.overcommit
		}
		if in.flags&fuzzExtraParam != 0 {
			params[in.paramKey] = in.paramValue
		}
		if len(params) > 0 {
			s.Parameters = params
		}
	})
	return pvc, class, true
}

// FuzzValidateClaim builds a claim and its class from fuzzed sizes,
// volume modes, access modes, reclaim policies, provisioners, parameters,
// annotations, UIDs and the rest of what validateClaim reads. Whatever
// the input, it changes neither object, and:
//   - an accepted request has 0 < bytes <= volume.MaxBytes, the claim's
//     request rounded up by less than a byte, a size quantity equal to
//     bytes, the claim's volume mode (Filesystem or Block, Filesystem
//     when unset), the class's reclaim policy (Delete or Retain, Delete
//     when unset), the volume ID of the claim's UID, the class it was
//     given and its parameters as classparams reads them; and only for a
//     claim of Plinth's class with access modes ReadWriteOnce or
//     ReadWriteOncePod, no selector, populator data source or volume
//     attributes class (snapshots and claims as sources are checked
//     against the API server, after validateClaim: restore.go);
//   - a refusal wraps errInvalidClaim and returns no request.
//
// The seed corpus (TestValidateClaim's refused claims) runs with every
// `go test`; make test-fuzz fuzzes it briefly.
func FuzzValidateClaim(f *testing.F) {
	ok := claimInput{size: "1Gi", access: "ReadWriteOnce", uid: testUID, annKey: ownership.AnnSelectedNode, annValue: testNode}
	with := func(mut func(*claimInput)) claimInput {
		in := ok
		mut(&in)
		return in
	}
	for _, in := range []claimInput{
		ok,
		with(func(in *claimInput) { in.flags, in.mode = fuzzVolumeMode, "Block"; in.access = "ReadWriteOncePod" }),
		with(func(in *claimInput) { in.flags, in.reclaim = fuzzReclaim, "Retain" }),
		with(func(in *claimInput) { in.size = "1500m" }),
		with(func(in *claimInput) { in.size = "0" }),
		with(func(in *claimInput) { in.size = "-1Gi" }),
		with(func(in *claimInput) { in.size = "9223372036854775808" }),
		with(func(in *claimInput) { in.size = "100Ei" }),
		with(func(in *claimInput) { in.flags = fuzzNoRequest }),
		with(func(in *claimInput) { in.flags, in.mode = fuzzVolumeMode, "Tape" }),
		with(func(in *claimInput) { in.access = "ReadWriteOnce,ReadWriteMany" }),
		with(func(in *claimInput) { in.access = "ReadOnlyMany" }),
		with(func(in *claimInput) { in.access = "" }),
		with(func(in *claimInput) { in.flags, in.paramKey, in.paramValue = fuzzExtraParam, "fsType", "ext4" }),
		with(func(in *claimInput) { in.flags, in.overcommit = fuzzOvercommit, "0.5" }),
		with(func(in *claimInput) { in.flags, in.provisioner = fuzzOtherDriver, "x" }),
		with(func(in *claimInput) { in.flags, in.reclaim = fuzzReclaim, "Recycle" }),
		with(func(in *claimInput) { in.flags = fuzzSelector }),
		with(func(in *claimInput) { in.flags = fuzzDataSource }),
		with(func(in *claimInput) { in.flags, in.rootDirMode = fuzzRootDirMode, "2770" }),
		with(func(in *claimInput) { in.flags, in.rootDirMode = fuzzRootDirMode, "1777" }),
		with(func(in *claimInput) { in.flags, in.rootDirMode = fuzzRootDirMode, "0o770" }),
		with(func(in *claimInput) { in.flags, in.rootDirMode = fuzzRootDirMode, "u=rwx" }),
		with(func(in *claimInput) { in.flags, in.rootDirMode = fuzzRootDirMode, "" }),
		with(func(in *claimInput) {
			in.flags, in.mode, in.rootDirMode = fuzzVolumeMode|fuzzRootDirMode, "Block", "0999"
		}),
	} {
		in.add(f)
	}
	f.Fuzz(func(t *testing.T, flags uint16, size, mode, access, reclaim, provisioner, rootDirMode, overcommit,
		paramKey, paramValue, annKey, annValue, uid, attributesClass string) {
		in := claimInput{flags, size, mode, access, reclaim, provisioner, rootDirMode, overcommit,
			paramKey, paramValue, annKey, annValue, uid, attributesClass}
		pvc, class, ok := in.build()
		if !ok {
			return
		}
		pvcBefore, classBefore := pvc.DeepCopy(), class.DeepCopy()
		r, err := validateClaim(pvc, class, testDriver)
		if !equality.Semantic.DeepEqual(pvc, pvcBefore) || !equality.Semantic.DeepEqual(class, classBefore) {
			t.Fatalf("validateClaim changed its claim or class: %+v", in)
		}
		if err != nil {
			if !errors.Is(err, errInvalidClaim) || r != nil {
				t.Fatalf("validateClaim(%+v) = %+v, %v; want no request and errInvalidClaim", in, r, err)
			}
			return
		}
		if r == nil {
			t.Fatalf("validateClaim(%+v): no request and no error", in)
		}
		q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		above := q.DeepCopy()
		above.Add(*resource.NewQuantity(1, resource.BinarySI))
		wantMode := corev1.PersistentVolumeFilesystem
		if pvc.Spec.VolumeMode != nil {
			wantMode = *pvc.Spec.VolumeMode
		}
		wantReclaim := corev1.PersistentVolumeReclaimDelete
		if class.ReclaimPolicy != nil {
			wantReclaim = *class.ReclaimPolicy
		}
		wantParams, perr := classparams.Parse(class.Parameters)
		switch {
		case r.bytes <= 0 || r.bytes > volume.MaxBytes:
			t.Fatalf("validateClaim(%+v): %d bytes, want 0 < bytes <= %d", in, r.bytes, volume.MaxBytes)
		case q.Cmp(r.size) > 0 || above.Cmp(r.size) <= 0:
			t.Fatalf("validateClaim(%+v): size %s for a request of %s, want it rounded up by less than a byte", in, r.size.String(), q.String())
		case r.size.Value() != r.bytes || r.size.Cmp(*resource.NewQuantity(r.bytes, resource.BinarySI)) != 0:
			t.Fatalf("validateClaim(%+v): size %s is not %d bytes", in, r.size.String(), r.bytes)
		case r.mode != wantMode || (r.mode != corev1.PersistentVolumeFilesystem && r.mode != corev1.PersistentVolumeBlock):
			t.Fatalf("validateClaim(%+v): volume mode %q for a claim of %q", in, r.mode, wantMode)
		case r.reclaim != wantReclaim || (r.reclaim != corev1.PersistentVolumeReclaimDelete && r.reclaim != corev1.PersistentVolumeReclaimRetain):
			t.Fatalf("validateClaim(%+v): reclaim policy %q for a class of %q", in, r.reclaim, wantReclaim)
		case r.id != ownership.VolumeIDFor(pvc.UID):
			t.Fatalf("validateClaim(%+v): volume ID %q, want %q", in, r.id, ownership.VolumeIDFor(pvc.UID))
		case r.class != class || class.Provisioner != testDriver:
			t.Fatalf("validateClaim(%+v): accepted with class %+v", in, r.class)
		case perr != nil || r.params != wantParams:
			t.Fatalf("validateClaim(%+v): parameters %+v, classparams reads %+v, %v", in, r.params, wantParams, perr)
		case pvc.Spec.Selector != nil || pvc.Spec.DataSource != nil || pvc.Spec.DataSourceRef != nil ||
			(pvc.Spec.VolumeAttributesClassName != nil && *pvc.Spec.VolumeAttributesClassName != ""):
			t.Fatalf("validateClaim(%+v): accepted a selector, a data source or a volume attributes class", in)
		case len(pvc.Spec.AccessModes) == 0:
			t.Fatalf("validateClaim(%+v): accepted a claim without access modes", in)
		}
		for _, m := range pvc.Spec.AccessModes {
			if m != corev1.ReadWriteOnce && m != corev1.ReadWriteOncePod {
				t.Fatalf("validateClaim(%+v): accepted access mode %q", in, m)
			}
		}
		if id, ok := ownership.ClaimUIDOf(r.id); ok && id != pvc.UID {
			t.Fatalf("validateClaim(%+v): volume ID %q reads back as the claim UID %q", in, r.id, id)
		}
	})
}
