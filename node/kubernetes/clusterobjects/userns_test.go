package clusterobjects_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/launch"
)

// userNamespacePolicyName names the policy docs/security.md gives
// operators who want pods with claims in their own user namespace.
const userNamespacePolicyName = "claims-need-own-user-namespace"

// TestDocumentedUserNamespacePolicy: the ValidatingAdmissionPolicy and
// binding that docs/security.md gives, read from the document itself so
// that the two cannot drift, refuse against a real API server a pod with
// a claim (persistentVolumeClaim or ephemeral) that leaves hostUsers
// unset or true, with a message that says what to set, and admit the same
// pod with hostUsers false and pods without claims. The writes are dry
// runs, which admission judges as real ones. No runtime here runs user
// namespaces: what the kernel then refuses is not tested.
func TestDocumentedUserNamespacePolicy(t *testing.T) {
	cp := controllertest.ControlPlane(t)
	ctx := context.Background()
	c := cp.Client
	policy, binding := documentedUserNamespacePolicy(t)

	ns := "user-namespaces"
	label := binding.Spec.MatchResources.NamespaceSelector.MatchLabels
	for _, err := range []error{
		ignoreExists(c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: label}}, metav1.CreateOptions{})),
		ignoreExists(c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})),
		ignoreExists(c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{})),
		ignoreExists(c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{})),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, policy.Name, metav1.DeleteOptions{})
	})

	yes, no := true, false
	claim := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
	}}
	class := "storage.plinth.dev"
	ephemeral := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}},
	}}}
	emptyDir := corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	create := func(hostUsers *bool, volumes ...corev1.Volume) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "pod-"},
			Spec: corev1.PodSpec{
				HostUsers:  hostUsers,
				Volumes:    volumes,
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
			},
		}
		_, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	// The API server learns of the policy and its binding through a watch.
	controllertest.Eventually(t, 30*time.Second, "the documented policy in force", func() (bool, error) {
		return create(nil, claim) != nil, nil
	})

	j := judge{t}
	const says = "must set spec.hostUsers to false"
	for what, err := range map[string]error{
		"a pod with a claim, hostUsers unset":            create(nil, claim),
		"a pod with a claim, hostUsers true":             create(&yes, claim),
		"a pod with an ephemeral claim, hostUsers unset": create(nil, emptyDir, ephemeral),
	} {
		j.refused(userNamespacePolicyName, what, err)
		if err != nil && !strings.Contains(err.Error(), says) {
			t.Errorf("%s: refused with %q, want a message that says it %s", what, err, says)
		}
	}
	for what, err := range map[string]error{
		"a pod with a claim, hostUsers false":            create(&no, claim),
		"a pod with an ephemeral claim, hostUsers false": create(&no, ephemeral),
		"a pod without volumes":                          create(nil),
		"a pod with an emptyDir only, hostUsers true":    create(&yes, emptyDir),
	} {
		j.allowed(what, err)
	}

	// The API server's type check of the policy warns of nothing.
	var live *admissionv1.ValidatingAdmissionPolicy
	controllertest.Eventually(t, 30*time.Second, "the type check of the documented policy", func() (bool, error) {
		var err error
		live, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, policy.Name, metav1.GetOptions{})
		return err == nil && live.Status.ObservedGeneration == live.Generation && live.Status.TypeChecking != nil, err
	})
	for _, w := range live.Status.TypeChecking.ExpressionWarnings {
		t.Errorf("documented policy, %s: %s", w.FieldRef, w.Warning)
	}
}

// documentedUserNamespacePolicy reads the policy and its binding from the
// one YAML block of docs/security.md that defines the policy, strictly:
// a field the API does not know fails the test.
func documentedUserNamespacePolicy(t *testing.T) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	root, err := launch.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for i, part := range strings.Split(string(doc), "```") {
		if i%2 == 1 && strings.HasPrefix(part, "yaml\n") && strings.Contains(part, "name: "+userNamespacePolicyName+"\n") {
			if block != "" {
				t.Fatalf("docs/security.md has more than one YAML block naming %s", userNamespacePolicyName)
			}
			block = strings.TrimPrefix(part, "yaml\n")
		}
	}
	var policy *admissionv1.ValidatingAdmissionPolicy
	var binding *admissionv1.ValidatingAdmissionPolicyBinding
	for _, d := range strings.Split(block, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(d), &meta); err != nil {
			t.Fatalf("docs/security.md, the policy's block: %v", err)
		}
		var into any
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			policy = &admissionv1.ValidatingAdmissionPolicy{}
			into = policy
		case "ValidatingAdmissionPolicyBinding":
			binding = &admissionv1.ValidatingAdmissionPolicyBinding{}
			into = binding
		default:
			t.Fatalf("docs/security.md, the policy's block: a document of kind %q", meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(d), into); err != nil {
			t.Fatalf("docs/security.md, the policy's %s: %v", meta.Kind, err)
		}
	}
	switch {
	case policy == nil || policy.Name != userNamespacePolicyName:
		t.Fatalf("docs/security.md gives no ValidatingAdmissionPolicy %s", userNamespacePolicyName)
	case binding == nil || binding.Spec.PolicyName != policy.Name:
		t.Fatalf("docs/security.md gives no ValidatingAdmissionPolicyBinding of %s", userNamespacePolicyName)
	case binding.Spec.MatchResources == nil || binding.Spec.MatchResources.NamespaceSelector == nil ||
		len(binding.Spec.MatchResources.NamespaceSelector.MatchLabels) == 0:
		t.Fatalf("the documented binding of %s selects no namespaces by label", userNamespacePolicyName)
	}
	return policy, binding
}
