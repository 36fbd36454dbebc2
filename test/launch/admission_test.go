package launch

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"source.plinth.dev/node/kubernetes/clusterobjects"
)

// TestAdmissionServerCallsOnlyWhenItCan: the admission server's claim
// labeller and placer start once its rights are in force and stop before
// the API server, so a launch's start and teardown leave none of their
// calls refused in its log, the launcher's or client-go's (klog, where
// leader election reports): no "forbidden" from a start before applyRBAC,
// no "connection refused" from a teardown that stopped the API server
// first.
func TestAdmissionServerCallsOnlyWhenItCan(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane (-short)")
	}
	dir, err := os.MkdirTemp("", "plinth-admission-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var launcher, klogged lockedBuffer
	klog.LogToStderr(false)
	klog.SetOutputBySeverity("INFO", &klogged) // every severity, once
	defer klog.LogToStderr(true)
	cp, err := StartControlPlane(ctx, ControlPlaneConfig{Dir: dir, Log: &launcher})
	if err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = cp.Stop(context.Background())
		}
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("control plane logs kept in %s", cp.LogDir)
		}
	}()
	// The placer has made its calls once it holds its Lease.
	if err := cp.waitFor(ctx, "the placer's Lease", 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, clusterobjects.PlacerLeaseName, metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := cp.Stop(context.Background()); err != nil {
		t.Fatalf("stopping control plane: %v", err)
	}
	admission, err := os.ReadFile(filepath.Join(cp.LogDir, "plinth-admission.log"))
	if err != nil {
		t.Fatal(err)
	}
	klog.Flush()
	logs := map[string]string{"admission server": string(admission), "launcher": launcher.String(), "klog": klogged.String()}
	for name, log := range logs {
		for line := range strings.Lines(log) {
			if strings.Contains(line, "forbidden") || strings.Contains(line, "connection refused") {
				t.Errorf("%s: a refused call: %s", name, strings.TrimSpace(line))
			}
		}
	}
}

// lockedBuffer is a bytes.Buffer the launcher's goroutines may write to
// at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
