package clusterobjects_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/kubernetes/capacity"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/test/controllertest"
)

// TestMain runs the tests against the controller tests' control plane
// (controllertest: real etcd and kube-apiserver, with an audit log of the
// node identity's calls; no root needed), with the snapshot API, whose
// contents the node writes too.
func TestMain(m *testing.M) { os.Exit(controllertest.Tests(m, controllertest.WithSnapshotAPI()).Run()) }

func logger(t *testing.T) logtree.LeveledLogger {
	var w testWriter
	w.t = t
	return logtree.New(logtree.WithSink(&w)).LeveledFor("test")
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func admin(t *testing.T) kubernetes.Interface {
	return controllertest.ControlPlane(t).Client
}

// versions returns the resource versions of the ensured objects.
func versions(t *testing.T, c kubernetes.Interface) []string {
	t.Helper()
	ctx := context.Background()
	d, err1 := c.StorageV1().CSIDrivers().Get(ctx, names.DriverName, metav1.GetOptions{})
	sc, err2 := c.StorageV1().StorageClasses().Get(ctx, names.StorageClassName, metav1.GetOptions{})
	r, err3 := c.RbacV1().ClusterRoles().Get(ctx, clusterobjects.ClusterRoleName, metav1.GetOptions{})
	b, err4 := c.RbacV1().ClusterRoleBindings().Get(ctx, clusterobjects.ClusterRoleName, metav1.GetOptions{})
	cr, err5 := c.RbacV1().Roles(capacity.DefaultNamespace).Get(ctx, clusterobjects.CapacityRoleName, metav1.GetOptions{})
	cb, err6 := c.RbacV1().RoleBindings(capacity.DefaultNamespace).Get(ctx, clusterobjects.CapacityRoleName, metav1.GetOptions{})
	for _, err := range []error{err1, err2, err3, err4, err5, err6} {
		if err != nil {
			t.Fatalf("reading ensured objects: %v", err)
		}
	}
	v := []string{d.ResourceVersion, sc.ResourceVersion, r.ResourceVersion, b.ResourceVersion, cr.ResourceVersion, cb.ResourceVersion}
	for _, name := range clusterobjects.AdmissionPolicyNames() {
		p, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading ensured objects: %v", err)
		}
		pb, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading ensured objects: %v", err)
		}
		// The policy's generation, not its version: the API server writes
		// the policy's status (its type check) by itself after a change.
		v = append(v, fmt.Sprint("generation ", p.Generation), pb.ResourceVersion)
	}
	return v
}

func TestEnsure(t *testing.T) {
	c := admin(t)
	ctx := context.Background()
	log := logger(t)
	// The class as a new cluster has it: none. (An earlier run in this
	// control plane, go test -count, left it not the default, which
	// Ensure rightly keeps.)
	if err := c.StorageV1().StorageClasses().Delete(ctx, names.StorageClassName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// Several nodes starting at once.
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Go(func() { errs <- clusterobjects.Ensure(ctx, c, capacity.DefaultNamespace, log) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Ensure: %v", err)
		}
	}
	d, err := c.StorageV1().CSIDrivers().Get(ctx, names.DriverName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.AttachRequired || *d.Spec.FSGroupPolicy != "File" || d.Spec.StorageCapacity == nil || !*d.Spec.StorageCapacity || !reflect.DeepEqual(d.Spec.VolumeLifecycleModes, clusterobjects.CSIDriver().Spec.VolumeLifecycleModes) {
		t.Errorf("CSIDriver spec %+v", d.Spec)
	}
	sc, err := c.StorageV1().StorageClasses().Get(ctx, names.StorageClassName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Provisioner != names.DriverName || *sc.VolumeBindingMode != "WaitForFirstConsumer" || !*sc.AllowVolumeExpansion ||
		*sc.ReclaimPolicy != "Delete" || sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("StorageClass %+v", sc)
	}

	// Idempotent: a second Ensure writes nothing.
	before := versions(t, c)
	if err := clusterobjects.Ensure(ctx, c, capacity.DefaultNamespace, log); err != nil {
		t.Fatal(err)
	}
	if after := versions(t, c); !reflect.DeepEqual(before, after) {
		t.Errorf("second Ensure changed objects: resource versions %v -> %v", before, after)
	}

	// Drift: rules and the admission policy are put back; a deleted class
	// comes back; an administrator's choice (not the default class any
	// more) is kept.
	role, _ := c.RbacV1().ClusterRoles().Get(ctx, clusterobjects.ClusterRoleName, metav1.GetOptions{})
	role.Rules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}
	if _, err := c.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	capRoles := c.RbacV1().Roles(capacity.DefaultNamespace)
	capRole, _ := capRoles.Get(ctx, clusterobjects.CapacityRoleName, metav1.GetOptions{})
	capRole.Rules[0].Verbs = append(capRole.Rules[0].Verbs, "patch")
	if _, err := capRoles.Update(ctx, capRole, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	policies := c.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	policy, _ := policies.Get(ctx, clusterobjects.ClaimsPolicyName, metav1.GetOptions{})
	policy.Spec.Validations = policy.Spec.Validations[:1]
	if _, err := policies.Update(ctx, policy, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.StorageV1().StorageClasses().Delete(ctx, names.StorageClassName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := clusterobjects.Ensure(ctx, c, capacity.DefaultNamespace, log); err != nil {
		t.Fatal(err)
	}
	role, _ = c.RbacV1().ClusterRoles().Get(ctx, clusterobjects.ClusterRoleName, metav1.GetOptions{})
	if !reflect.DeepEqual(role.Rules, clusterobjects.ClusterRole().Rules) {
		t.Errorf("rules not restored: %+v", role.Rules)
	}
	capRole, _ = capRoles.Get(ctx, clusterobjects.CapacityRoleName, metav1.GetOptions{})
	if !reflect.DeepEqual(capRole.Rules, clusterobjects.CapacityRole(capacity.DefaultNamespace).Rules) {
		t.Errorf("capacity rules not restored: %+v", capRole.Rules)
	}
	policy, _ = policies.Get(ctx, clusterobjects.ClaimsPolicyName, metav1.GetOptions{})
	if !reflect.DeepEqual(policy.Spec, clusterobjects.AdmissionPolicies()[0].Spec) {
		t.Errorf("admission policy not restored: %d validations", len(policy.Spec.Validations))
	}
	sc, err = c.StorageV1().StorageClasses().Get(ctx, names.StorageClassName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("deleted StorageClass not recreated: %v", err)
	}
	sc.Annotations["storageclass.kubernetes.io/is-default-class"] = "false"
	if _, err := c.StorageV1().StorageClasses().Update(ctx, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := clusterobjects.Ensure(ctx, c, capacity.DefaultNamespace, log); err != nil {
		t.Fatal(err)
	}
	sc, _ = c.StorageV1().StorageClasses().Get(ctx, names.StorageClassName, metav1.GetOptions{})
	if sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "false" {
		t.Error("Ensure overrode the administrator's default-class choice")
	}
}

// TestEnsureRestricted: with the node's own identity, Ensure reads what is
// there and writes nothing; what it may not create is reported, not an
// error.
func TestEnsureRestricted(t *testing.T) {
	c := admin(t)
	ctx := context.Background()
	if err := clusterobjects.Ensure(ctx, c, capacity.DefaultNamespace, logger(t)); err != nil {
		t.Fatal(err)
	}
	node := controllertest.NodeClient(t)
	before := versions(t, c)
	if err := clusterobjects.Ensure(ctx, node, capacity.DefaultNamespace, logger(t)); err != nil {
		t.Fatalf("Ensure as the node with everything in place: %v", err)
	}
	if after := versions(t, c); !reflect.DeepEqual(before, after) {
		t.Errorf("restricted Ensure changed objects: %v -> %v", before, after)
	}
	if err := c.StorageV1().CSIDrivers().Delete(ctx, names.DriverName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := clusterobjects.Ensure(ctx, node, capacity.DefaultNamespace, logger(t)); err != nil {
		t.Fatalf("Ensure as the node without the CSIDriver: %v (want a warning, not an error)", err)
	}
	if _, err := c.StorageV1().CSIDrivers().Get(ctx, names.DriverName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the node created the CSIDriver (or: %v); its role must not allow that", err)
	}
	if err := clusterobjects.Ensure(ctx, c, capacity.DefaultNamespace, logger(t)); err != nil {
		t.Fatal(err)
	}
}
