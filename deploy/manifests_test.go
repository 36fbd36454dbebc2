// Package deploy holds the manifests that install Plinth storage on any
// cluster (kubectl apply -k deploy/). Its test keeps them equal to what
// the node agent's code defines and needs.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"source.plinth.dev/node/kubernetes/capacity"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/names"
)

// objects decodes every document of the manifests the kustomization lists.
func objects(t *testing.T) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "admission.yaml", "storage.yaml", "daemonset.yaml", "webhook.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			objs = append(objs, obj)
		}
	}
	kust, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(kust), ".yaml"); n != 6 {
		t.Fatalf("kustomization.yaml lists %d files, the test reads 6", n)
	}
	return objs
}

// TestManifestsMatchTheCode: the ClusterRole has exactly the rules the code
// uses (clusterobjects.ClusterRole, audited against a real node), the
// binding reaches the DaemonSet's service account, the admission policies
// and their bindings are the code's (and the policies match that service
// account), and the CSIDriver and default StorageClass are the ones every
// node checks for at start.
func TestManifestsMatchTheCode(t *testing.T) {
	var (
		role    *rbacv1.ClusterRole
		binding *rbacv1.ClusterRoleBinding
		driver  *storagev1.CSIDriver
		classes = map[string]*storagev1.StorageClass{}
		ds      *appsv1.DaemonSet

		policies       []*admissionv1.ValidatingAdmissionPolicy
		policyBindings []*admissionv1.ValidatingAdmissionPolicyBinding
	)
	for _, o := range objects(t) {
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			if o.Name == clusterobjects.ClusterRoleName {
				role = o
			}
		case *rbacv1.ClusterRoleBinding:
			if o.Name == clusterobjects.ClusterRoleName {
				binding = o
			}
		case *storagev1.CSIDriver:
			driver = o
		case *storagev1.StorageClass:
			classes[o.Name] = o
		case *appsv1.DaemonSet:
			ds = o
		case *admissionv1.ValidatingAdmissionPolicy:
			if !webhookPolicy(o.Name) {
				policies = append(policies, o)
			}
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			if !webhookPolicy(o.Name) {
				policyBindings = append(policyBindings, o)
			}
		}
	}
	// admission.yaml: each policy, then each binding, in the code's order.
	wantPolicies, wantBindings := clusterobjects.AdmissionPolicies(), clusterobjects.AdmissionPolicyBindings()
	if len(policies) != len(wantPolicies) || len(policyBindings) != len(wantBindings) {
		t.Errorf("admission.yaml has %d policies and %d bindings, the code %d and %d", len(policies), len(policyBindings), len(wantPolicies), len(wantBindings))
	}
	for i, want := range wantPolicies {
		if i >= len(policies) || policies[i].Name != want.Name || !reflect.DeepEqual(policies[i].Spec, want.Spec) {
			t.Errorf("admission.yaml's ValidatingAdmissionPolicy %d differs from the code's; the code's is\n%s", i, manifest(t, want))
		}
	}
	for i, want := range wantBindings {
		if i >= len(policyBindings) || policyBindings[i].Name != want.Name || !reflect.DeepEqual(policyBindings[i].Spec, want.Spec) {
			t.Errorf("admission.yaml's ValidatingAdmissionPolicyBinding %d differs from the code's; the code's is\n%s", i, manifest(t, want))
		}
	}
	if role == nil || binding == nil || driver == nil || ds == nil {
		t.Fatalf("missing objects: role %v, binding %v, driver %v, daemonset %v", role != nil, binding != nil, driver != nil, ds != nil)
	}
	want := clusterobjects.ClusterRole()
	if role.Name != want.Name || !reflect.DeepEqual(role.Rules, want.Rules) {
		t.Errorf("ClusterRole %s has rules\n%+v\nthe code uses\n%+v", role.Name, role.Rules, want.Rules)
	}
	wantBinding := clusterobjects.ClusterRoleBinding()
	if binding.Name != wantBinding.Name || binding.RoleRef != wantBinding.RoleRef {
		t.Errorf("ClusterRoleBinding %s refers to %+v, want %s referring to %+v", binding.Name, binding.RoleRef, wantBinding.Name, wantBinding.RoleRef)
	}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: ds.Spec.Template.Spec.ServiceAccountName, Namespace: ds.Namespace}
	if sa.Namespace != clusterobjects.DaemonSetNamespace || sa.Name != clusterobjects.DaemonSetServiceAccount {
		t.Errorf("the DaemonSet runs as %s/%s; the admission policy knows the node agent as %s", sa.Namespace, sa.Name, clusterobjects.DaemonSetUser())
	}
	subjects := append([]rbacv1.Subject{}, wantBinding.Subjects...)
	if !reflect.DeepEqual(binding.Subjects, append(subjects, sa)) {
		t.Errorf("binding subjects %+v, want the node agents' group and the DaemonSet's service account %+v", binding.Subjects, sa)
	}
	wantDriver := clusterobjects.CSIDriver()
	if driver.Name != wantDriver.Name || !reflect.DeepEqual(driver.Spec, wantDriver.Spec) {
		t.Errorf("CSIDriver %s spec %+v, the code's %s %+v", driver.Name, driver.Spec, wantDriver.Name, wantDriver.Spec)
	}
	wantClass := clusterobjects.StorageClass()
	class := classes[wantClass.Name]
	if class == nil || class.Provisioner != wantClass.Provisioner || !reflect.DeepEqual(class.ReclaimPolicy, wantClass.ReclaimPolicy) ||
		!reflect.DeepEqual(class.VolumeBindingMode, wantClass.VolumeBindingMode) || !reflect.DeepEqual(class.AllowVolumeExpansion, wantClass.AllowVolumeExpansion) ||
		!reflect.DeepEqual(class.Annotations, wantClass.Annotations) || len(class.Parameters) != 0 {
		t.Errorf("StorageClass %s = %+v, the code's %+v", wantClass.Name, class, wantClass)
	}
	for name, c := range classes {
		if c.Provisioner != names.DriverName {
			t.Errorf("StorageClass %s has provisioner %s", name, c.Provisioner)
		}
	}
}

// webhookPolicy says whether name is one of the admission server's own
// policies (webhook.yaml's, TestWebhookMatchesTheCode's), not the node
// agents'.
func webhookPolicy(name string) bool {
	for _, p := range clusterobjects.WebhookConfigPolicies() {
		if p.Name == name {
			return true
		}
	}
	return false
}

// manifest is obj as a document of admission.yaml.
func manifest(t *testing.T, obj runtime.Object) string {
	t.Helper()
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Replace(string(b), "status: {}\n", "", 1)
}

// TestDaemonSetPaths: CSI target paths come from the kubelet as host
// paths, so the kubelet directory must be mounted at its own path, with
// Bidirectional propagation, and be the one --kubelet-dir names; the node
// tree, which holds the data directory, must exist already.
func TestDaemonSetPaths(t *testing.T) {
	var ds *appsv1.DaemonSet
	for _, o := range objects(t) {
		if d, ok := o.(*appsv1.DaemonSet); ok {
			ds = d
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet")
	}
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("plinth-node must run privileged (mounts, loop devices, quotas)")
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
		// The node tree holds the data directory: a node without it must
		// not get an empty one on its root filesystem.
		if v.HostPath != nil && v.HostPath.Path == "/var/lib/plinth" && (v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory) {
			t.Errorf("host path %s is not of type Directory: the kubelet would create it where the data disk is missing", v.HostPath.Path)
		}
	}
	kubeletDir := ""
	for _, a := range c.Args {
		if d, ok := strings.CutPrefix(a, "--kubelet-dir="); ok {
			kubeletDir = d
		}
	}
	found := false
	for _, m := range c.VolumeMounts {
		if hostPaths[m.Name] != m.MountPath {
			t.Errorf("volume %s: host path %s mounted at %s; the plugin and the kubelet must see the same paths", m.Name, hostPaths[m.Name], m.MountPath)
		}
		if m.MountPath == kubeletDir {
			found = true
			if m.MountPropagation == nil || *m.MountPropagation != "Bidirectional" {
				t.Errorf("kubelet directory %s is mounted without Bidirectional propagation: the plugin's mounts would not reach the pods", kubeletDir)
			}
		}
	}
	if kubeletDir == "" || !found {
		t.Errorf("--kubelet-dir %q is not a mounted host path", kubeletDir)
	}
}

// TestWebhookMatchesTheCode: webhook.yaml registers the code's webhook
// (clusterobjects.NodeWritesWebhook) at its Service, whose port reaches
// the container's; its server runs as a service account bound to the
// code's roles (the Secret role for the Secret its args name, the lease
// role of the placer in its own namespace), with a certificate for the
// name the API server calls it by.
func TestWebhookMatchesTheCode(t *testing.T) {
	var (
		config   *admissionv1.ValidatingWebhookConfiguration
		labels   *admissionv1.MutatingWebhookConfiguration
		role     *rbacv1.ClusterRole
		binding  *rbacv1.ClusterRoleBinding
		secrets  *rbacv1.Role
		bindingS *rbacv1.RoleBinding
		lease    *rbacv1.Role
		bindingL *rbacv1.RoleBinding
		service  *corev1.Service
		deploy   *appsv1.Deployment
		pdb      *policyv1.PodDisruptionBudget

		policies       []*admissionv1.ValidatingAdmissionPolicy
		policyBindings []*admissionv1.ValidatingAdmissionPolicyBinding
	)
	for _, o := range objects(t) {
		switch o := o.(type) {
		case *admissionv1.ValidatingWebhookConfiguration:
			config = o
		case *admissionv1.MutatingWebhookConfiguration:
			labels = o
		case *rbacv1.ClusterRole:
			if o.Name == clusterobjects.AdmissionRoleName {
				role = o
			}
		case *rbacv1.ClusterRoleBinding:
			if o.Name == clusterobjects.AdmissionRoleName {
				binding = o
			}
		case *rbacv1.Role:
			switch o.Name {
			case clusterobjects.AdmissionRoleName:
				secrets = o
			case clusterobjects.AdmissionLeaseRoleName:
				lease = o
			}
		case *rbacv1.RoleBinding:
			switch o.Name {
			case clusterobjects.AdmissionRoleName:
				bindingS = o
			case clusterobjects.AdmissionLeaseRoleName:
				bindingL = o
			}
		case *corev1.Service:
			service = o
		case *appsv1.Deployment:
			deploy = o
		case *policyv1.PodDisruptionBudget:
			pdb = o
		case *admissionv1.ValidatingAdmissionPolicy:
			if webhookPolicy(o.Name) {
				policies = append(policies, o)
			}
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			if webhookPolicy(o.Name) {
				policyBindings = append(policyBindings, o)
			}
		}
	}
	testWebhookPolicies(t, policies, policyBindings)
	if config == nil || labels == nil || role == nil || binding == nil || secrets == nil || bindingS == nil || lease == nil || bindingL == nil ||
		service == nil || deploy == nil {
		t.Fatalf("webhook.yaml lacks objects: configurations %v %v, roles %v %v %v, bindings %v %v %v, service %v, deployment %v",
			config != nil, labels != nil, role != nil, secrets != nil, lease != nil, binding != nil, bindingS != nil, bindingL != nil,
			service != nil, deploy != nil)
	}
	if len(config.Webhooks) != 1 || config.Webhooks[0].ClientConfig.Service == nil {
		t.Fatalf("the configuration has %d webhooks; want one, called at a Service", len(config.Webhooks))
	}
	svc := config.Webhooks[0].ClientConfig.Service
	want := clusterobjects.NodeWritesWebhook(admissionv1.WebhookClientConfig{Service: svc})
	if config.Name != want.Name || !reflect.DeepEqual(config.Webhooks, want.Webhooks) {
		t.Errorf("webhook.yaml's configuration differs from the code's; the code's is\n%s", manifest(t, want))
	}
	if svc.Path == nil || *svc.Path != clusterobjects.WebhookPath || svc.Name != service.Name || svc.Namespace != service.Namespace {
		t.Errorf("the webhook is called at %s/%s %v; the Service is %s/%s and the server serves %s",
			svc.Namespace, svc.Name, svc.Path, service.Namespace, service.Name, clusterobjects.WebhookPath)
	}
	// The claim labels are called at the same Service, on their path.
	if len(labels.Webhooks) != 1 || labels.Webhooks[0].ClientConfig.Service == nil {
		t.Fatalf("the claim labels' configuration has %d webhooks; want one, called at a Service", len(labels.Webhooks))
	}
	lsvc := labels.Webhooks[0].ClientConfig.Service
	wantLabels := clusterobjects.ClaimLabelsWebhook(admissionv1.WebhookClientConfig{Service: lsvc})
	if labels.Name != wantLabels.Name || !reflect.DeepEqual(labels.Webhooks, wantLabels.Webhooks) {
		t.Errorf("webhook.yaml's claim labels differ from the code's; the code's are\n%s", manifest(t, wantLabels))
	}
	if lsvc.Path == nil || *lsvc.Path != clusterobjects.ClaimLabelsPath || lsvc.Name != service.Name || lsvc.Namespace != service.Namespace ||
		lsvc.Port == nil || svc.Port == nil || *lsvc.Port != *svc.Port {
		t.Errorf("the claim labels are called at %s/%s %v; the Service is %s/%s and the server labels at %s",
			lsvc.Namespace, lsvc.Name, lsvc.Path, service.Namespace, service.Name, clusterobjects.ClaimLabelsPath)
	}
	if wantRole := clusterobjects.AdmissionRole(); !reflect.DeepEqual(role.Rules, wantRole.Rules) {
		t.Errorf("ClusterRole %s has rules\n%+v\nthe code's are\n%+v", role.Name, role.Rules, wantRole.Rules)
	}

	pod := deploy.Spec.Template.Spec
	args := strings.Join(pod.Containers[0].Args, " ")
	secretNS, secretName, dnsName := "", "", ""
	for _, a := range pod.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--certificate-secret="); ok {
			secretNS, secretName, _ = strings.Cut(v, "/")
		}
		if v, ok := strings.CutPrefix(a, "--certificate-dns-name="); ok {
			dnsName = v
		}
	}
	if !strings.HasPrefix(args, "admission-serve ") || secretNS != deploy.Namespace || secretName == "" {
		t.Errorf("the Deployment runs %q; want admission-serve with a Secret of its namespace", args)
	}
	if dnsName != service.Name+"."+service.Namespace+".svc" {
		t.Errorf("its certificate is for %q; the API server calls %s.%s.svc", dnsName, service.Name, service.Namespace)
	}
	if wantS := clusterobjects.AdmissionSecretRole(secretNS, secretName); secrets.Namespace != secretNS || !reflect.DeepEqual(secrets.Rules, wantS.Rules) {
		t.Errorf("Role %s/%s has rules\n%+v\nthe code's for Secret %s/%s are\n%+v", secrets.Namespace, secrets.Name, secrets.Rules, secretNS, secretName, wantS.Rules)
	}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: pod.ServiceAccountName, Namespace: deploy.Namespace}
	// The placer elects its leader in the server's own namespace.
	if wantL := clusterobjects.AdmissionLeaseRole(deploy.Namespace); lease.Namespace != wantL.Namespace || !reflect.DeepEqual(lease.Rules, wantL.Rules) {
		t.Errorf("Role %s/%s has rules\n%+v\nthe code's in %s are\n%+v", lease.Namespace, lease.Name, lease.Rules, wantL.Namespace, wantL.Rules)
	}
	if wantB := clusterobjects.AdmissionLeaseRoleBinding(deploy.Namespace, sa); bindingL.Namespace != wantB.Namespace ||
		bindingL.RoleRef != wantB.RoleRef || !reflect.DeepEqual(bindingL.Subjects, wantB.Subjects) {
		t.Errorf("RoleBinding %s/%s grants %+v to %+v; the code's %s/%s grants %+v to %+v",
			bindingL.Namespace, bindingL.Name, bindingL.RoleRef, bindingL.Subjects, wantB.Namespace, wantB.Name, wantB.RoleRef, wantB.Subjects)
	}
	for _, b := range []struct {
		subjects []rbacv1.Subject
		ref      rbacv1.RoleRef
		kind     string
	}{{binding.Subjects, binding.RoleRef, "ClusterRole"}, {bindingS.Subjects, bindingS.RoleRef, "Role"}} {
		if !reflect.DeepEqual(b.subjects, []rbacv1.Subject{sa}) || b.ref.Kind != b.kind || b.ref.Name != clusterobjects.AdmissionRoleName {
			t.Errorf("binding of %s %s to %+v; want to the Deployment's service account %+v", b.ref.Kind, b.ref.Name, b.subjects, sa)
		}
	}
	if sa.Name == clusterobjects.DaemonSetServiceAccount {
		t.Errorf("the webhook runs as the node agents' service account, which it judges")
	}
	if sa.Namespace != clusterobjects.AdmissionNamespace || sa.Name != clusterobjects.AdmissionServiceAccount {
		t.Errorf("the webhook runs as %s/%s; its policies know it as %s", sa.Namespace, sa.Name, clusterobjects.AdmissionServiceAccountUser())
	}
	testWebhookPlacement(t, deploy, pdb)

	// The Service reaches the container's port, and the probes ask it.
	if len(service.Spec.Ports) != 1 || svc.Port == nil || service.Spec.Ports[0].Port != *svc.Port {
		t.Fatalf("Service ports %+v; the webhook is called at port %v", service.Spec.Ports, svc.Port)
	}
	target := service.Spec.Ports[0].TargetPort.IntValue()
	listen := ""
	for _, a := range pod.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--listen="); ok {
			listen = v
		}
	}
	if listen != ":"+strconv.Itoa(target) || !reflect.DeepEqual(service.Spec.Selector, deploy.Spec.Template.Labels) {
		t.Errorf("the Service sends port %d to pods %v; the server listens on %q, its pods are %v", target, service.Spec.Selector, listen, deploy.Spec.Template.Labels)
	}
	c := pod.Containers[0]
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.IntValue() != target || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("probe %+v does not ask the server's HTTPS port %d", p, target)
		}
	}
}

// testWebhookPolicies: webhook.yaml holds the code's policies over the
// admission server's writes of its configurations
// (clusterobjects.WebhookConfigPolicies), and their bindings.
func testWebhookPolicies(t *testing.T, policies []*admissionv1.ValidatingAdmissionPolicy, bindings []*admissionv1.ValidatingAdmissionPolicyBinding) {
	wantPolicies, wantBindings := clusterobjects.WebhookConfigPolicies(), clusterobjects.WebhookConfigPolicyBindings()
	for i, want := range wantPolicies {
		if i >= len(policies) || policies[i].Name != want.Name || !reflect.DeepEqual(policies[i].Spec, want.Spec) {
			t.Errorf("webhook.yaml's ValidatingAdmissionPolicy %d differs from the code's; the code's is\n%s", i, manifest(t, want))
		}
	}
	for i, want := range wantBindings {
		if i >= len(bindings) || bindings[i].Name != want.Name || !reflect.DeepEqual(bindings[i].Spec, want.Spec) {
			t.Errorf("webhook.yaml's ValidatingAdmissionPolicyBinding %d differs from the code's; the code's is\n%s", i, manifest(t, want))
		}
	}
}

// testWebhookPlacement: the webhook's pods run on control-plane nodes
// only (a node that ran it could answer for itself), and a
// PodDisruptionBudget keeps one of them running through a drain.
func testWebhookPlacement(t *testing.T, deploy *appsv1.Deployment, pdb *policyv1.PodDisruptionBudget) {
	controlPlane := []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.NodeSelectorOpExists},
	}}}
	a := deploy.Spec.Template.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		!reflect.DeepEqual(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, controlPlane) ||
		len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Errorf("the webhook's node affinity is %+v; want control-plane nodes required", a)
	}
	if pdb == nil || pdb.Namespace != deploy.Namespace || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 ||
		pdb.Spec.Selector == nil || !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, deploy.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget %+v; want minAvailable 1 of the webhook's pods %v", pdb, deploy.Spec.Template.Labels)
	}
	if deploy.Spec.Replicas == nil || *deploy.Spec.Replicas < 2 {
		t.Errorf("the webhook has %v replicas: with minAvailable 1, a drain could never evict the one", deploy.Spec.Replicas)
	}
}

// TestFlowSchemasMatchTheCode: webhook.yaml gives the admission server's
// service account the code's FlowSchemas (clusterobjects.
// AdmissionFlowSchemas), its Lease's in the Deployment's namespace, so
// that its reads are not queued behind the node agents' writes that wait
// for them.
func TestFlowSchemasMatchTheCode(t *testing.T) {
	var (
		got    []*flowcontrolv1.FlowSchema
		deploy *appsv1.Deployment
	)
	for _, o := range objects(t) {
		switch o := o.(type) {
		case *flowcontrolv1.FlowSchema:
			got = append(got, o)
		case *appsv1.Deployment:
			deploy = o
		}
	}
	if deploy == nil {
		t.Fatal("webhook.yaml has no Deployment")
	}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: deploy.Spec.Template.Spec.ServiceAccountName, Namespace: deploy.Namespace}
	want, err := clusterobjects.AdmissionFlowSchemas(deploy.Namespace, sa)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("the manifests have %d FlowSchemas; the code has %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Name != w.Name || !reflect.DeepEqual(got[i].Labels, w.Labels) || !reflect.DeepEqual(got[i].Spec, w.Spec) {
			t.Errorf("FlowSchema %d (%s) differs from the code's; the code's is\n%s", i, got[i].Name, manifest(t, w))
		}
	}
}

// TestCapacityRoleMatchesTheCode: the Role by which node agents publish
// capacity is the code's, in the namespace the DaemonSet publishes in, and
// bound to the node agents' group and the DaemonSet's service account.
func TestCapacityRoleMatchesTheCode(t *testing.T) {
	var (
		role    *rbacv1.Role
		binding *rbacv1.RoleBinding
		ds      *appsv1.DaemonSet
	)
	for _, o := range objects(t) {
		switch o := o.(type) {
		case *rbacv1.Role:
			if o.Name == clusterobjects.CapacityRoleName {
				role = o
			}
		case *rbacv1.RoleBinding:
			if o.Name == clusterobjects.CapacityRoleName {
				binding = o
			}
		case *appsv1.DaemonSet:
			ds = o
		}
	}
	if role == nil || binding == nil || ds == nil {
		t.Fatalf("missing objects: role %v, binding %v, daemonset %v", role != nil, binding != nil, ds != nil)
	}
	for _, arg := range ds.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(arg, "--capacity-namespace") {
			t.Fatalf("the DaemonSet sets %s; this test expects the default, %s", arg, capacity.DefaultNamespace)
		}
	}
	want, wantBinding := clusterobjects.CapacityRole(capacity.DefaultNamespace), clusterobjects.CapacityRoleBinding(capacity.DefaultNamespace)
	if role.Namespace != want.Namespace || !reflect.DeepEqual(role.Rules, want.Rules) {
		t.Errorf("Role %s/%s has rules\n%+v\nthe code's, in %s, has\n%+v", role.Namespace, role.Name, role.Rules, want.Namespace, want.Rules)
	}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: clusterobjects.DaemonSetServiceAccount, Namespace: clusterobjects.DaemonSetNamespace}
	subjects := append([]rbacv1.Subject{}, wantBinding.Subjects...)
	if binding.Namespace != wantBinding.Namespace || binding.RoleRef != wantBinding.RoleRef || !reflect.DeepEqual(binding.Subjects, append(subjects, sa)) {
		t.Errorf("RoleBinding %s/%s refers to %+v for %+v; want %s referring to %+v for %+v",
			binding.Namespace, binding.Name, binding.RoleRef, binding.Subjects, wantBinding.Namespace, wantBinding.RoleRef, append(subjects, sa))
	}
}

// TestSnapshotClassMatchesTheCode: deploy/snapshotclass.yaml is the
// default VolumeSnapshotClass test/launch creates
// (clusterobjects.SnapshotClass).
func TestSnapshotClassMatchesTheCode(t *testing.T) {
	data, err := os.ReadFile("snapshotclass.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got crdv1.VolumeSnapshotClass
	if err := yaml.UnmarshalStrict(data, &got); err != nil {
		t.Fatalf("snapshotclass.yaml: %v", err)
	}
	if want := clusterobjects.SnapshotClass(); !reflect.DeepEqual(&got, want) {
		wantYAML, _ := yaml.Marshal(want)
		t.Errorf("snapshotclass.yaml is\n%+v\nthe code's class is\n%s", got, wantYAML)
	}
}
