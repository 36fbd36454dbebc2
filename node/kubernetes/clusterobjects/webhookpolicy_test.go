package clusterobjects_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/test/controllertest"
)

// TestAdmissionServerChangesOnlyCABundle: against a real API server,
// with clusterobjects.WebhookConfigPolicies installed, the admission
// server's identity may change the caBundle of its two configurations and
// nothing else of them (each other field of a webhook, a webhook more or
// less, the labels); an administrator still may. The writes are dry runs,
// which the API server admits as it admits real ones.
func TestAdmissionServerChangesOnlyCABundle(t *testing.T) {
	cp := controllertest.ControlPlane(t)
	ctx := context.Background()
	admin := cp.Client
	for _, p := range clusterobjects.WebhookConfigPolicies() {
		if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, b := range clusterobjects.WebhookConfigPolicyBindings() {
		if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	server := cp.AdmissionClient()
	dry := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	updateV := func(as string, change func(*admissionv1.ValidatingWebhookConfiguration)) error {
		c := server
		if as == "admin" {
			c = admin
		}
		cfg, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, clusterobjects.WebhookName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(cfg)
		_, err = c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, cfg, dry)
		return err
	}
	updateM := func(change func(*admissionv1.MutatingWebhookConfiguration)) error {
		cfg, err := server.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, clusterobjects.ClaimLabelsWebhookName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(cfg)
		_, err = server.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, cfg, dry)
		return err
	}
	ignore := admissionv1.Ignore
	failOpen := func(c *admissionv1.ValidatingWebhookConfiguration) { c.Webhooks[0].FailurePolicy = &ignore }
	// The API server learns of the policies through a watch.
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		return updateV("server", failOpen) != nil, nil
	})

	bundle := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	if err := updateV("server", func(c *admissionv1.ValidatingWebhookConfiguration) { c.Webhooks[0].ClientConfig.CABundle = bundle }); err != nil {
		t.Errorf("the server setting the node writes' caBundle: %v", err)
	}
	if err := updateM(func(c *admissionv1.MutatingWebhookConfiguration) { c.Webhooks[0].ClientConfig.CABundle = bundle }); err != nil {
		t.Errorf("the server setting the claim labels' caBundle: %v", err)
	}
	elsewhere := "https://attacker.example/validate"
	never := admissionv1.NeverReinvocationPolicy
	refused := map[string]error{
		"failurePolicy Ignore": updateV("server", failOpen),
		"clientConfig.url elsewhere": updateV("server", func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig = admissionv1.WebhookClientConfig{URL: &elsewhere, CABundle: bundle}
		}),
		"no rules": updateV("server", func(c *admissionv1.ValidatingWebhookConfiguration) { c.Webhooks[0].Rules = nil }),
		"no match conditions": updateV("server", func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].MatchConditions = nil
		}),
		"an object selector": updateV("server", func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"never": "set"}}
		}),
		"no webhooks": updateV("server", func(c *admissionv1.ValidatingWebhookConfiguration) { c.Webhooks = nil }),
		"a webhook more": updateV("server", func(c *admissionv1.ValidatingWebhookConfiguration) {
			w := *c.Webhooks[0].DeepCopy()
			w.Name = "more." + w.Name
			c.Webhooks = append(c.Webhooks, w)
		}),
		"a label": updateV("server", func(c *admissionv1.ValidatingWebhookConfiguration) { c.Labels["x"] = "y" }),
		"claim labels failurePolicy Ignore": updateM(func(c *admissionv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].FailurePolicy = &ignore
		}),
		"claim labels reinvocationPolicy Never": updateM(func(c *admissionv1.MutatingWebhookConfiguration) {
			c.Webhooks[0].ReinvocationPolicy = &never
		}),
	}
	for what, err := range refused {
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("the admission server's change of %s: %v, want refused", what, err)
		} else if !strings.Contains(err.Error(), "may change only the caBundle") {
			t.Errorf("the admission server's change of %s refused, but not by the policy: %v", what, err)
		}
	}
	if err := updateV("admin", failOpen); err != nil {
		t.Errorf("an administrator's change of the failurePolicy: %v", err)
	}
	// The API server's type check of each policy warns of nothing.
	for _, p := range clusterobjects.WebhookConfigPolicies() {
		var live *admissionv1.ValidatingAdmissionPolicy
		controllertest.Eventually(t, 30*time.Second, "the type check of policy "+p.Name, func() (bool, error) {
			var err error
			live, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, p.Name, metav1.GetOptions{})
			return err == nil && live.Status.ObservedGeneration == live.Generation && live.Status.TypeChecking != nil, err
		})
		for _, w := range live.Status.TypeChecking.ExpressionWarnings {
			t.Errorf("policy %s, %s: %s", p.Name, w.FieldRef, w.Warning)
		}
	}
}

// TestWebhookPoliciesCoverEveryField: the fields WebhookConfigPolicies
// keep, with the caBundle, are every field k8s.io/api gives a webhook, so
// that a field a newer API adds is not left open.
func TestWebhookPoliciesCoverEveryField(t *testing.T) {
	for _, c := range []struct {
		typ    reflect.Type
		policy *admissionv1.ValidatingAdmissionPolicy
	}{
		{reflect.TypeFor[admissionv1.ValidatingWebhook](), clusterobjects.WebhookConfigPolicies()[0]},
		{reflect.TypeFor[admissionv1.MutatingWebhook](), clusterobjects.WebhookConfigPolicies()[1]},
	} {
		rule := c.policy.Spec.Validations[len(c.policy.Spec.Validations)-1].Expression
		for _, f := range jsonFields(c.typ, "") {
			if f == "clientConfig.caBundle" {
				continue
			}
			path := "." + strings.ReplaceAll(f, ".", ".?")
			if !strings.Contains(f, ".") {
				path = ".?" + f
			}
			if !strings.Contains(rule, "w"+path+" == o"+path) {
				t.Errorf("policy %s does not keep %s.%s", c.policy.Name, c.typ.Name(), f)
			}
		}
	}
}

// jsonFields are the JSON names of typ's fields, and those of its
// clientConfig below it.
func jsonFields(typ reflect.Type, prefix string) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type == reflect.TypeFor[admissionv1.WebhookClientConfig]() {
			out = append(out, jsonFields(f.Type, prefix+name+".")...)
			continue
		}
		out = append(out, prefix+name)
	}
	slices.Sort(out)
	return out
}
