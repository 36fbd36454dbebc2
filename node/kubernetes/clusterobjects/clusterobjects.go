// Package clusterobjects makes sure the cluster-wide objects Plinth storage
// needs exist: the CSIDriver, the default StorageClass, and the RBAC rules
// and admission policies of the node agent.
//
// Every node runs Ensure at start, so the objects appear with the first node
// and come back if deleted, without an installer or a manifest to apply by
// hand. That makes Ensure run concurrently on many nodes and repeatedly on
// each: it only reads when everything is in place, treats "already exists"
// as success, and never overwrites what an administrator may deliberately
// have changed (the default-class annotation, for example). Only the RBAC
// rules and the admission policies, which are Plinth's own and must match
// their code, are put back.
package clusterobjects

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/logtree"
)

const (
	// ClusterRoleName names the ClusterRole and ClusterRoleBinding of the
	// node agent.
	ClusterRoleName = "plinth:node"
	// NodeAgentGroup is the group the binding grants the role to. A node
	// agent's client certificate carries it as its organisation (O=), so
	// plinth-node never needs cluster-admin. (It cannot run as its node's
	// system:node identity: NodeRestriction rightly forbids that identity
	// to create PersistentVolumes.)
	NodeAgentGroup = "plinth:nodes"
	// CapacityRoleName names the Role, and its RoleBinding, that let node
	// agents write capacity objects in the namespace they publish in
	// (CapacityRole).
	CapacityRoleName = "plinth:node:capacity"

	// snapshotGroup is the API group of the snapshot API's CRDs.
	snapshotGroup = "snapshot.storage.k8s.io"

	annDefaultClass = "storageclass.kubernetes.io/is-default-class"
	labelManagedBy  = "app.kubernetes.io/managed-by"
	managedBy       = "plinth-node"
)

// CSIDriver is the CSIDriver object of the Plinth driver.
//
// No attach step (volumes are local), persistent volumes only, and
// fsGroupPolicy File: the kubelet applies a pod's fsGroup to the volume,
// which is what users of a directory-backed volume expect. storageCapacity
// is on: each node publishes CSIStorageCapacity objects for its classes
// (package capacity), and the scheduler places a pod whose claim waits for
// its first consumer only on a node that has room for it.
func CSIDriver() *storagev1.CSIDriver {
	attach, podInfo, capacity := false, false, true
	policy := storagev1.FileFSGroupPolicy
	return &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: names.DriverName, Labels: map[string]string{labelManagedBy: managedBy}},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       &attach,
			PodInfoOnMount:       &podInfo,
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
			FSGroupPolicy:        &policy,
			StorageCapacity:      &capacity,
		},
	}
}

// StorageClass is the default StorageClass.
//
// WaitForFirstConsumer, because a volume exists on one node only: the
// scheduler must pick the node (with the pod's other constraints) before the
// volume is made there.
func StorageClass() *storagev1.StorageClass {
	reclaim := corev1.PersistentVolumeReclaimDelete
	binding := storagev1.VolumeBindingWaitForFirstConsumer
	expand := true
	return &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        names.StorageClassName,
			Labels:      map[string]string{labelManagedBy: managedBy},
			Annotations: map[string]string{annDefaultClass: "true"},
		},
		Provisioner:          names.DriverName,
		ReclaimPolicy:        &reclaim,
		VolumeBindingMode:    &binding,
		AllowVolumeExpansion: &expand,
	}
}

// annDefaultSnapshotClass marks the VolumeSnapshotClass the
// snapshot-controller uses for a VolumeSnapshot that names none.
const annDefaultSnapshotClass = "snapshot.storage.kubernetes.io/is-default-class"

// SnapshotClass is the default VolumeSnapshotClass of the driver, named
// like the default StorageClass, so that a user snapshots a claim without
// choosing a class. It has no parameters: every snapshot's share of
// blocks stays reserved (a class of its own with parameter overcommit
// lends room, classparams.SnapshotParams); deletionPolicy
// Delete: deleting the VolumeSnapshot deletes the node's copy, as deleting
// a claim of the default StorageClass deletes its volume. It exists only
// where the snapshot API is served: the installer applies it after the
// snapshot CRDs (test/launch does; deploy/snapshotclass.yaml).
func SnapshotClass() *crdv1.VolumeSnapshotClass {
	return &crdv1.VolumeSnapshotClass{
		TypeMeta: metav1.TypeMeta{APIVersion: crdv1.SchemeGroupVersion.String(), Kind: "VolumeSnapshotClass"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        names.StorageClassName,
			Labels:      map[string]string{labelManagedBy: managedBy},
			Annotations: map[string]string{annDefaultSnapshotClass: "true"},
		},
		Driver:         names.DriverName,
		DeletionPolicy: crdv1.VolumeSnapshotContentDelete,
	}
}

// ClusterRole holds what the node agent's parts use, and no more (each
// verb on each resource is used by some path of the code, and nothing else
// is: TestNodeRoleIsWhatTheNodeUses checks both against the API server's
// audit log of a real node):
//   - provisioner: watch claims and classes, read its Node; create, read,
//     delete PVs of its node (an informer of them, live reads before
//     destroying data); read namespace kube-system, whose UID names the
//     cluster its volumes belong to;
//   - restore and clone (provisioner restore.go): read the VolumeSnapshot
//     a claim names and its VolumeSnapshotContent, or the claim it names
//     and that claim's PV (the rules above), live before the copy;
//   - resizer: patch PVs and claim status; read a claim and its PV again
//     after a write conflict;
//   - both: create Events, and patch them when they repeat;
//   - node removal: watch CSINodes (which nodes run the driver), read
//     Nodes, list and delete PVs of removed nodes (noderemoval);
//   - capacity: watch and delete the CSIStorageCapacity objects of its
//     node (the Node read above gives their owner), and list them in
//     every namespace at start, to remove those left where it no longer
//     publishes. It creates and updates them only in the namespace it
//     publishes in, by CapacityRole there;
//   - Ensure: read the CSIDriver, StorageClass, its own ClusterRole and
//     binding, CapacityRole and its binding, and its admission policies
//     and their bindings
//     (AdmissionPolicies, which narrow the writes above to the node's own
//     objects), so a node finds them in place without write access. Create
//     is deliberately missing: it cannot be limited to names, and a node
//     that may create StorageClasses may create any. Whoever issues the
//     node's credentials installs these objects (test/launch does); a node
//     run with admin credentials creates them itself;
//   - snapshots: watch the VolumeSnapshotContents labelled for its node
//     (package snapshots), and patch them (their being-created mark and
//     finalizer) and their status; list them once at start, to know
//     whether the cluster serves the snapshot API;
//   - start: ask who it is (a SelfSubjectReview, WhoAmI), so that a node
//     agent the admission policies would not restrict refuses to run
//     (CheckDaemonSetIdentity). Every user may already (system:basic-user);
//     the rule says the node needs it.
//
// The CSI plugin makes no API calls: the kubelet tells it all it needs.
func ClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName, Labels: map[string]string{labelManagedBy: managedBy}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
			// patch: a node binds a claim placed on it to its volume
			// (provisioner bindClaim) and hands back one it cannot
			// provision (handBack); it never places one.
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
			// The cluster's identity, which the provisioner records with
			// its volumes and checks before it removes any.
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{"kube-system"}, Verbs: []string{"get"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csidrivers"}, Verbs: []string{"get"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csistoragecapacities"}, Verbs: []string{"list", "watch", "delete"}},
			{APIGroups: []string{snapshotGroup}, Resources: []string{"volumesnapshotcontents"}, Verbs: []string{"list", "watch", "patch"}},
			{APIGroups: []string{snapshotGroup}, Resources: []string{"volumesnapshotcontents/status"}, Verbs: []string{"patch"}},
			// The source of a claim restored from a snapshot, read live
			// before the copy (provisioner restore.go).
			{APIGroups: []string{snapshotGroup}, Resources: []string{"volumesnapshots", "volumesnapshotcontents"}, Verbs: []string{"get"}},
			// A content's class, read live for its parameters before
			// the snapshot is made (snapshots class.go).
			{APIGroups: []string{snapshotGroup}, Resources: []string{"volumesnapshotclasses"}, Verbs: []string{"get"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings"},
				ResourceNames: []string{ClusterRoleName}, Verbs: []string{"get"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"},
				ResourceNames: []string{CapacityRoleName}, Verbs: []string{"get"}},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"},
				ResourceNames: AdmissionPolicyNames(), Verbs: []string{"get"}},
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}, Verbs: []string{"create"}},
		},
	}
}

// ClusterRoleBinding grants ClusterRole to NodeAgentGroup.
func ClusterRoleBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName, Labels: map[string]string{labelManagedBy: managedBy}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: NodeAgentGroup}},
	}
}

// CapacityRole lets node agents create and update CSIStorageCapacity
// objects in namespace, the one they publish in (plinth-node
// --capacity-namespace), and nowhere else: the scheduler reads capacity
// from every namespace, so a node free to write in any could fill its
// users' namespaces with objects they cannot tell from their own. Which of
// the objects there a node may write, the capacity policy and the webhook
// decide (AdmissionPolicies). A node moved to another namespace publishes
// there only once this Role and its binding are there too (docs/operating.md).
func CapacityRole(namespace string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: CapacityRoleName, Namespace: namespace, Labels: map[string]string{labelManagedBy: managedBy}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csistoragecapacities"}, Verbs: []string{"create", "update"}},
		},
	}
}

// CapacityRoleBinding grants CapacityRole of namespace to NodeAgentGroup.
func CapacityRoleBinding(namespace string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: CapacityRoleName, Namespace: namespace, Labels: map[string]string{labelManagedBy: managedBy}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: CapacityRoleName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: NodeAgentGroup}},
	}
}

// Ensure creates whichever of the objects is missing and reports, but
// leaves, objects that differ in ways that cannot or should not be changed.
// Lacking the right to create or fix an object (a node running with its
// restricted identity) is logged, not an error: retrying cannot help, and
// the installer is responsible then. It returns an error when an object
// could not be read or created for any other reason (API server not
// reachable yet), which is worth a retry. capacityNamespace is the
// namespace the node publishes its capacity in (CapacityRole).
func Ensure(ctx context.Context, client kubernetes.Interface, capacityNamespace string, log logtree.LeveledLogger) error {
	if capacityNamespace == "" {
		return errors.New("ensuring the cluster objects: no capacity namespace")
	}
	var errs []error
	for _, step := range []struct {
		what   string
		ensure func(context.Context, kubernetes.Interface, logtree.LeveledLogger) error
	}{
		{"CSIDriver " + names.DriverName, ensureCSIDriver},
		{"StorageClass " + names.StorageClassName, ensureStorageClass},
		{"RBAC " + ClusterRoleName, ensureRBAC},
		{"RBAC " + capacityNamespace + "/" + CapacityRoleName, func(ctx context.Context, c kubernetes.Interface, log logtree.LeveledLogger) error {
			return ensureCapacityRBAC(ctx, c, capacityNamespace, log)
		}},
		{"ValidatingAdmissionPolicies", ensureAdmissionPolicies},
	} {
		err := step.ensure(ctx, client, log)
		switch {
		case apierrors.IsForbidden(err):
			log.Warningf("cannot ensure %s with this identity (%v); it must be installed with admin credentials", step.what, err)
		case err != nil:
			errs = append(errs, fmt.Errorf("ensuring %s: %w", step.what, err))
		}
	}
	return errors.Join(errs...)
}

func ensureCSIDriver(ctx context.Context, client kubernetes.Interface, log logtree.LeveledLogger) error {
	api := client.StorageV1().CSIDrivers()
	want := CSIDriver()
	have, err := getOrCreate(ctx, want, api.Get, api.Create, log)
	if err != nil || have == nil {
		return err
	}
	// The spec fields are immutable; a differing driver object was made by
	// someone else on purpose, or by an older Plinth. Say so; the kubelet
	// keeps working with it either way.
	if !reflect.DeepEqual(have.Spec.AttachRequired, want.Spec.AttachRequired) ||
		!reflect.DeepEqual(have.Spec.FSGroupPolicy, want.Spec.FSGroupPolicy) ||
		!reflect.DeepEqual(have.Spec.VolumeLifecycleModes, want.Spec.VolumeLifecycleModes) {
		log.Warningf("CSIDriver %s exists with a different spec (attachRequired %v, fsGroupPolicy %v, modes %v); leaving it as it is",
			want.Name, deref(have.Spec.AttachRequired), deref(have.Spec.FSGroupPolicy), have.Spec.VolumeLifecycleModes)
	}
	// storageCapacity may be changed, but only by whoever may write
	// CSIDrivers (the node may not): an object made by an older Plinth
	// leaves the scheduler blind to capacity until an administrator turns
	// it on.
	if have.Spec.StorageCapacity == nil || !*have.Spec.StorageCapacity {
		log.Warningf("CSIDriver %s has storageCapacity off: the scheduler ignores the capacity the nodes publish and may place pods where their volumes do not fit; set spec.storageCapacity to true", want.Name)
	}
	return nil
}

func ensureStorageClass(ctx context.Context, client kubernetes.Interface, log logtree.LeveledLogger) error {
	api := client.StorageV1().StorageClasses()
	want := StorageClass()
	have, err := getOrCreate(ctx, want, api.Get, api.Create, log)
	if err != nil || have == nil {
		return err
	}
	if have.Provisioner != want.Provisioner {
		log.Warningf("StorageClass %s exists but belongs to provisioner %q; leaving it alone", want.Name, have.Provisioner)
	}
	return nil
}

func ensureRBAC(ctx context.Context, client kubernetes.Interface, log logtree.LeveledLogger) error {
	roles := client.RbacV1().ClusterRoles()
	wantRole := ClusterRole()
	role, err := getOrCreate(ctx, wantRole, roles.Get, roles.Create, log)
	if err != nil {
		return err
	}
	if role != nil && !reflect.DeepEqual(role.Rules, wantRole.Rules) {
		err := restore(ctx, wantRole.Name, roles.Get, roles.Update, func(cur *rbacv1.ClusterRole) { cur.Rules = wantRole.Rules })
		if err != nil {
			return fmt.Errorf("updating rules: %w", err)
		}
		log.Infof("updated the rules of ClusterRole %s", wantRole.Name)
	}
	bindings := client.RbacV1().ClusterRoleBindings()
	wantBinding := ClusterRoleBinding()
	binding, err := getOrCreate(ctx, wantBinding, bindings.Get, bindings.Create, log)
	if err != nil {
		return err
	}
	if binding != nil && binding.RoleRef != wantBinding.RoleRef {
		log.Warningf("ClusterRoleBinding %s refers to %s %s; leaving it alone", wantBinding.Name, binding.RoleRef.Kind, binding.RoleRef.Name)
	}
	return nil
}

func ensureCapacityRBAC(ctx context.Context, client kubernetes.Interface, namespace string, log logtree.LeveledLogger) error {
	roles := client.RbacV1().Roles(namespace)
	wantRole := CapacityRole(namespace)
	role, err := getOrCreate(ctx, wantRole, roles.Get, roles.Create, log)
	if err != nil {
		return err
	}
	if role != nil && !reflect.DeepEqual(role.Rules, wantRole.Rules) {
		err := restore(ctx, wantRole.Name, roles.Get, roles.Update, func(cur *rbacv1.Role) { cur.Rules = wantRole.Rules })
		if err != nil {
			return fmt.Errorf("updating rules: %w", err)
		}
		log.Infof("updated the rules of Role %s/%s", namespace, wantRole.Name)
	}
	bindings := client.RbacV1().RoleBindings(namespace)
	wantBinding := CapacityRoleBinding(namespace)
	binding, err := getOrCreate(ctx, wantBinding, bindings.Get, bindings.Create, log)
	if err != nil {
		return err
	}
	if binding != nil && binding.RoleRef != wantBinding.RoleRef {
		log.Warningf("RoleBinding %s/%s refers to %s %s; leaving it alone", namespace, wantBinding.Name, binding.RoleRef.Kind, binding.RoleRef.Name)
	}
	return nil
}

// getOrCreate returns the existing object (nil if it was just created).
// Reading first means that on every start but the first, Ensure makes no
// writes at all, and works with read-only access.
func getOrCreate[T any](ctx context.Context, want T,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	log logtree.LeveledLogger,
) (T, error) {
	var zero T
	name := any(want).(metav1.Object).GetName()
	have, err := get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return have, nil
	}
	if !apierrors.IsNotFound(err) {
		return zero, fmt.Errorf("reading %s: %w", name, err)
	}
	if _, err := create(ctx, want, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Another node won the race; read what it made.
			return get(ctx, name, metav1.GetOptions{})
		}
		return zero, fmt.Errorf("creating %s: %w", name, err)
	}
	log.Infof("created %T %s", want, name)
	return zero, nil
}

// restore sets again, with set, what Plinth owns of the object called name
// (read afresh, and again after a write conflict), for the objects that
// must match its code.
func restore[T any](ctx context.Context, name string,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	set func(T),
) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		set(cur)
		_, err = update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
