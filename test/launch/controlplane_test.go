package launch

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPolicyProbeLeavesNoWarning: a launch proves the admission policies
// and the webhook in force with probe objects (waitPolicyInForce), and
// none of them leaves a Warning Event for a user to find in `kubectl get
// events`. The PV controller syncs claims every 2 s here
// (--pvclaimbinder-sync-period), so a Warning about the probe claim would
// appear within the wait.
func TestPolicyProbeLeavesNoWarning(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane (-short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cp, stop := startTestControlPlane(ctx, t, "plinth-probe-", ControlPlaneConfig{})
	defer stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		events, err := cp.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
		if err != nil {
			t.Fatalf("listing Events: %v", err)
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name == policyProbe || strings.Contains(ev.Message, policyProbe) {
				t.Fatalf("the policy probe left a Warning Event: %s %s/%s: %s: %s",
					ev.InvolvedObject.Kind, ev.InvolvedObject.Namespace, ev.InvolvedObject.Name, ev.Reason, ev.Message)
			}
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// startTestControlPlane starts a control plane with cfg in a new temporary
// directory named by prefix, its log on stderr under -v. stop stops it
// and removes the directory, or keeps it, and says where its logs are,
// when the test failed.
func startTestControlPlane(ctx context.Context, t *testing.T, prefix string, cfg ControlPlaneConfig) (cp *ControlPlane, stop func()) {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dir = dir
	if testing.Verbose() {
		cfg.Log = os.Stderr
	}
	cp, err = StartControlPlane(ctx, cfg)
	if err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	return cp, func() {
		if err := cp.Stop(context.Background()); err != nil {
			t.Errorf("stopping control plane: %v", err)
		}
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("control plane logs kept in %s", cp.LogDir)
		}
	}
}
