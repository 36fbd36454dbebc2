package provisioner

import (
	"context"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"source.plinth.dev/node/kubernetes/internal/controllertest"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
)

// A claim the scheduler placed on the node is provisioned and bound
// without waiting for the PV controller to name the driver in it (here it
// may not: a policy refuses it), and the node names the driver as it
// binds. A placed claim of another driver's class stays untouched.
func TestUnnamedClaim(t *testing.T) {
	e := newEnv(t, true)
	refuseNaming(t, e)
	other := e.Class + "-other"
	e.CreateClassFor("other.example.com", other, corev1.PersistentVolumeReclaimDelete, nil)
	e.start(e.controller())

	// The other driver's claim first: by the time ours is bound, the
	// node has seen it.
	foreign := e.CreateClaim(controllertest.Claim{Name: "foreign", Class: other, Unnamed: true})
	c := e.CreateClaim(controllertest.Claim{Name: "data", Unnamed: true})
	pvc, pv := e.WaitBound("data")
	if want := ownership.VolumeIDFor(c.UID); pv.Name != want || pvc.Spec.VolumeName != want {
		t.Errorf("claim bound to %q (PV %s), want %s", pvc.Spec.VolumeName, pv.Name, want)
	}
	if got := ownership.ClaimProvisioner(pvc); got != names.DriverName {
		t.Errorf("bound claim names provisioner %q, want %q", got, names.DriverName)
	}
	e.NoPV(foreign.UID)
	if ids := e.VolumeIDs(); !slices.Equal(ids, []string{pv.Name}) {
		t.Errorf("volumes on the node: %v, want only %s", ids, pv.Name)
	}
	got, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), foreign.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := ownership.ClaimProvisioner(got); got.Spec.VolumeName != "" || p != "" {
		t.Errorf("the other driver's claim was changed: volumeName %q, provisioner %q", got.Spec.VolumeName, p)
	}
}

// A claim the PV controller bound to the node's PV before anything named
// the driver in it (here the node may not bind and the PV controller may
// not name it) is named by the node afterwards, so that the node's other
// controllers, the resizer among them, know it as theirs.
func TestAdoptClaim(t *testing.T) {
	e := newEnv(t, true)
	refuseBinding(t, e)
	refuseNaming(t, e)
	p := e.NodeProcess(t)
	p.Start()
	t.Cleanup(func() {
		p.Kill(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("plinth-node log (tail):\n%s", p.LogTail())
		}
	})

	off := p.LogSize()
	c := e.CreateClaim(controllertest.Claim{Name: "data", Unnamed: true})
	pvc, _ := e.WaitBound("data")
	if want := ownership.VolumeIDFor(c.UID); pvc.Spec.VolumeName != want {
		t.Fatalf("claim bound to %q, want %s", pvc.Spec.VolumeName, want)
	}
	controllertest.Eventually(t, 30*time.Second, "the bound claim naming the driver", func() (bool, error) {
		got, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), c.Name, metav1.GetOptions{})
		return err == nil && ownership.ClaimProvisioner(got) == names.DriverName, err
	})
	if !p.WaitLogged(regexp.MustCompile(`now names driver`), off, 5*time.Second, nil) {
		t.Error("the node's log does not say it named the driver on the claim")
	}
}

// pvBinder is the identity of the PV controller: kube-controller-manager
// runs it as this service account (--use-service-account-credentials).
const pvBinder = "system:serviceaccount:kube-system:persistent-volume-binder"

// refuseNaming holds the PV controller, in the test's namespace, to
// claims that keep the provisioner annotations they have: it still binds
// claims, but never names a driver in one, so a claim that names ours was
// named by the node.
func refuseNaming(t *testing.T, e *env) {
	t.Helper()
	cfg := rest.CopyConfig(controllertest.ControlPlane(t).RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: pvBinder,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
	}
	binder, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	same := func(key string) string {
		of := func(obj string) string { return obj + ".metadata.?annotations[?'" + key + "'].orValue('')" }
		return of("object") + " == " + of("oldObject")
	}
	refuseClaimUpdates(t, e, claimPolicy{
		name:       "refuse-naming",
		who:        "request.userInfo.username == '" + pvBinder + "'",
		validation: same(ownership.AnnStorageProvisioner) + " && " + same(ownership.AnnBetaStorageProvisioner),
		message:    "the PV controller may not name provisioners in this namespace",
		probe: func(ctx context.Context, claim string) error {
			pvc, err := binder.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, claim, metav1.GetOptions{})
			if err != nil {
				return err
			}
			pvc.Annotations[ownership.AnnStorageProvisioner] = "probe.invalid"
			_, err = binder.CoreV1().PersistentVolumeClaims(e.NS).Update(ctx, pvc, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
	})
}
