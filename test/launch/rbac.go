package launch

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/admission"
	"source.plinth.dev/node/kubernetes/capacity"
	"source.plinth.dev/node/kubernetes/clusterobjects"
)

// plinthNodeGroup is the group (O=) of plinth-node's client certificate:
// the group the node agent's ClusterRoleBinding names.
const plinthNodeGroup = clusterobjects.NodeAgentGroup

// applyRBAC creates plinth-node's ClusterRole and binding, the Role and
// binding by which it publishes capacity in the default namespace, its
// admission policies and their bindings, and the admission webhook's
// registration (applyAdmission), exactly as the node packages define them,
// so plinth-node runs with the restricted identity a real node has. (It
// does not run as system:node:<name>: NodeRestriction would rightly stop a
// kubelet identity from creating PersistentVolumes.) Objects that exist
// already are left alone.
func (c *Cluster) applyRBAC(ctx context.Context) error {
	role := clusterobjects.ClusterRole()
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	binding := clusterobjects.ClusterRoleBinding()
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", binding.Name, err)
	}
	// The nodes publish capacity in the default namespace.
	capRole := clusterobjects.CapacityRole(capacity.DefaultNamespace)
	if _, err := c.Client.RbacV1().Roles(capRole.Namespace).Create(ctx, capRole, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Role %s/%s: %w", capRole.Namespace, capRole.Name, err)
	}
	capBinding := clusterobjects.CapacityRoleBinding(capacity.DefaultNamespace)
	if _, err := c.Client.RbacV1().RoleBindings(capBinding.Namespace).Create(ctx, capBinding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating RoleBinding %s/%s: %w", capBinding.Namespace, capBinding.Name, err)
	}
	admission := c.Client.AdmissionregistrationV1()
	for _, policy := range clusterobjects.AdmissionPolicies() {
		if _, err := admission.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ValidatingAdmissionPolicy %s: %w", policy.Name, err)
		}
	}
	for _, binding := range clusterobjects.AdmissionPolicyBindings() {
		if _, err := admission.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ValidatingAdmissionPolicyBinding %s: %w", binding.Name, err)
		}
	}
	if c.admission != nil {
		if err := c.applyAdmission(ctx); err != nil {
			return err
		}
	}
	if err := c.waitPolicyInForce(ctx); err != nil {
		return err
	}
	// The admission server's bindings were made before the policies the
	// probe has just found in force, so the API server has had as long to
	// load them: its claim labeller and placer may start.
	if c.admission != nil {
		c.admission.granted()
	}
	return nil
}

// applyStorageObjects creates the CSIDriver and the default StorageClass.
// plinth-node ensures them at start too, but with its restricted identity
// it may only read them; like an installer, the launcher creates them with
// admin rights.
func (c *Cluster) applyStorageObjects(ctx context.Context) error {
	driver := clusterobjects.CSIDriver()
	if _, err := c.Client.StorageV1().CSIDrivers().Create(ctx, driver, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CSIDriver %s: %w", driver.Name, err)
	}
	class := clusterobjects.StorageClass()
	if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating StorageClass %s: %w", class.Name, err)
	}
	return nil
}

// PlinthNodeArgs are the plinth-node flags that fit this cluster: the node
// tree under <Dir>/node, with the XFS data filesystem as its data directory
// and the kubelet's root directory as its kubelet directory. On a host whose
// kernel cannot enforce XFS project quotas it adds
// --allow-unenforced-capacity, so filesystem volumes still work there (with
// plinth-node's loud warnings) instead of being refused.
func PlinthNodeArgs(p Paths) []string {
	args := []string{
		"--root=" + filepath.Join(p.Dir, "node"),
		"--data-dir=" + p.DataDir,
		"--kubelet-dir=" + p.KubeletRootDir,
		"--node-name=" + p.NodeName,
		"--kubeconfig=" + p.NodeKubeconfig,
	}
	if p.PlinthNodeMetrics != "" {
		args = append(args, "--metrics-address="+p.PlinthNodeMetrics)
	}
	if !p.QuotaEnforced {
		args = append(args, "--allow-unenforced-capacity")
	}
	return args
}

// policyProbe names the objects waitPolicyInForce probes with.
const policyProbe = "plinth-policy-probe"

// waitPolicyInForce waits until the API server applies the admission
// policies and the webhook to node agents, which it does once its
// informers have compiled them: until then a node's first writes would
// pass unchecked. Each probe is the control plane's node agent asking, as
// a dry run, for something of no node's, and each is refused by one
// policy or the webhook: a capacity object, a PV, the change of a claim
// placed on no node, and a PV the policies admit for a claim placed on no
// node. The probe claim, which exists while the probes run, leaves no
// Event (TestPolicyProbeLeavesNoWarning).
func (c *Cluster) waitPolicyInForce(ctx context.Context) error {
	node, err := KubeconfigClient(c.NodeKubeconfig)
	if err != nil {
		return err
	}
	dry := []string{metav1.DryRunAll}
	ns := metav1.NamespaceDefault
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: policyProbe, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
			// No class, and a volume that never exists: nothing provisions
			// or binds the claim, and the PV controller waits for the
			// volume without a word. (A claim of a class that does not
			// exist would leave a Warning Event, ProvisioningFailed, for
			// users to find.) Without a class it asks no driver for its
			// volume: the claims policy refuses a node agent any change of
			// it, and the webhook any PV for it.
			StorageClassName: new(""),
			VolumeName:       policyProbe,
		},
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the probe claim: %w", err)
	}
	defer func() {
		_ = c.Client.CoreV1().PersistentVolumeClaims(ns).Delete(context.WithoutCancel(ctx), claim.Name, metav1.DeleteOptions{})
	}()
	probes := map[string]func(context.Context) error{
		clusterobjects.CapacityPolicyName: func(ctx context.Context) error {
			// In the namespace where nodes may write capacity at all
			// (clusterobjects.CapacityRole).
			_, err := node.StorageV1().CSIStorageCapacities(capacity.DefaultNamespace).Create(ctx, &storagev1.CSIStorageCapacity{
				ObjectMeta: metav1.ObjectMeta{Name: policyProbe}, StorageClassName: policyProbe,
			}, metav1.CreateOptions{DryRun: dry})
			return err
		},
		clusterobjects.VolumesPolicyName: func(ctx context.Context) error {
			_, err := node.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: policyProbe},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
					AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "probe.invalid", VolumeHandle: "probe"}},
				},
			}, metav1.CreateOptions{DryRun: dry})
			return err
		},
		// The webhook: a PV the policies admit, for a claim that asks no
		// driver for its volume.
		clusterobjects.WebhookCheckName: func(ctx context.Context) error {
			probe, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			_, err = node.CoreV1().PersistentVolumes().Create(ctx, admission.Probe(c.NodeName, probe), metav1.CreateOptions{DryRun: dry})
			return err
		},
		clusterobjects.ClaimsPolicyName: func(ctx context.Context) error {
			_, err := node.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, claim.Name, types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"plinth-policy-probe":"x"}}}`), metav1.PatchOptions{DryRun: dry})
			return err
		},
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if c.admission == nil {
		delete(probes, clusterobjects.WebhookCheckName)
	}
	for name, probe := range probes {
		refusal := "ValidatingAdmissionPolicy '" + name + "'"
		if name == clusterobjects.WebhookCheckName {
			refusal = `admission webhook "` + name + `" denied`
		}
		err := c.waitFor(ctx, "admission policy "+name+" in force", 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			err := probe(ctx)
			if err == nil {
				return false, errors.New("a node agent's write of no node's object was admitted")
			}
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), refusal), err
		})
		if err != nil {
			return err
		}
	}
	return nil
}
