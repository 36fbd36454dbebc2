package provisioner

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/test/controllertest"
)

// A cluster that forbids nodes to bind claims (here an admission policy
// on the test's namespace) still gets them bound, by the PV controller;
// the node says once that it was refused and does not retry.
func TestBindRefused(t *testing.T) {
	e := newEnv(t, true)
	refuseBinding(t, e)

	p := e.NodeProcess(t)
	p.Run()
	// The node's patches of the claims, and how many the policy refused (a
	// conflict instead means the PV controller bound the claim first, which
	// a loaded machine makes likely: claims are made until one binding of
	// the node's has met the policy).
	patches, refused := map[string]int{}, 0
	audit := func() {
		clear(patches)
		refused = 0
		for _, c := range controllertest.NodeCalls(t, e.Node) {
			ref := c.ObjectRef
			if c.Verb != "patch" || ref == nil || ref.Resource != "persistentvolumeclaims" || ref.Subresource != "" || ref.Namespace != e.NS || c.Code() == 0 {
				continue
			}
			patches[ref.Name]++
			switch code := c.Code(); {
			case code < 300:
				t.Errorf("the node's patch of claim %s was accepted despite the policy", ref.Name)
			case code == 422:
				refused++
			}
		}
	}
	for i := range 10 {
		name := fmt.Sprintf("claim-%d", i)
		c := e.CreateClaim(controllertest.Claim{Name: name})
		pvc, pv := e.WaitBound(name)
		if pv.Name != ownership.VolumeIDFor(c.UID) || pvc.Spec.VolumeName != pv.Name {
			t.Errorf("claim %s bound to %q (PV %s)", name, pvc.Spec.VolumeName, pv.Name)
		}
		// Let a retry, if there were one, come before the log is read.
		time.Sleep(2 * time.Second)
		if audit(); refused > 0 || t.Failed() {
			break
		}
	}
	p.Kill(syscall.SIGTERM)
	if refused == 0 {
		t.Fatalf("no binding of the node's was refused (patches by claim: %v)", patches)
	}
	log, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	warned := regexp.MustCompile(`(?m)^W\d{4} .*binding claim .* refused`).FindAllString(string(log), -1)
	if len(warned) != refused {
		t.Errorf("%d warnings about refused bindings in the node's log, want %d: %q", len(warned), refused, warned)
	}
	// A sync that fails is logged with its retry count by the worker.
	retried := regexp.MustCompile(`(?m)^W\d{4} .*\] `+regexp.QuoteMeta(e.NS)+`/\S+: .*\(retry \d+\)$`).FindAllString(string(log), -1)
	if len(retried) > 0 {
		t.Errorf("the node retried claims after a refused binding: %q", retried)
	}
}

// refuseBinding installs, for the test's namespace only, an admission
// policy that refuses node agents any change of a claim's volumeName, and
// waits until the API server applies it to the node's identity.
func refuseBinding(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	name := "refuse-binding-" + e.NS
	deny := admissionv1.Deny
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": e.NS}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"persistentvolumeclaims"}},
				}}},
			},
			MatchConditions: []admissionv1.MatchCondition{{
				Name:       "node-agents",
				Expression: "'" + clusterobjects.NodeAgentGroup + "' in request.userInfo.groups",
			}},
			Validations: []admissionv1.Validation{{
				Expression: "object.spec.?volumeName.orValue('') == oldObject.spec.?volumeName.orValue('')",
				Message:    "nodes may not bind claims in this namespace",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{deny}},
	}
	api := e.Client.AdmissionregistrationV1()
	if _, err := api.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}) })
	if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}) })

	// The policy is in force once a node's dry-run binding is refused: a
	// binding the node agents' own policies (clusterobjects.AdmissionPolicies)
	// allows, of a claim placed on the node the client is the agent of, to
	// the volume named for it.
	cp := controllertest.ControlPlane(t)
	node := controllertest.NodeClient(t)
	probe := e.CreateClaim(controllertest.Claim{Name: "probe", Node: cp.NodeName})
	controllertest.Eventually(t, 30*time.Second, "the policy refusing a node's binding", func() (bool, error) {
		_, err := node.CoreV1().PersistentVolumeClaims(e.NS).Patch(ctx, probe.Name, types.MergePatchType,
			[]byte(`{"spec":{"volumeName":"`+ownership.VolumeIDFor(probe.UID)+`"}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			return false, err
		}
		return err != nil && strings.Contains(err.Error(), "nodes may not bind"), nil
	})
}
