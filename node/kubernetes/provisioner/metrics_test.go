package provisioner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/metrics"
	"source.plinth.dev/node/kubernetes/metrics/metricstest"
	"source.plinth.dev/test/controllertest"
)

// TestMetricsCountProvisioning runs the provisioner against the real API
// server with metrics, provisions claims of both modes, refuses one that
// does not fit, deletes the provisioned ones, and checks that the
// registry counts exactly that: provisions and their failure by reason,
// deletions, and work done by the claim queue.
func TestMetricsCountProvisioning(t *testing.T) {
	e := newEnv(t, true)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.controller()
	cfg.Metrics = m
	e.start(cfg)
	const claims = 4
	var made []*corev1.PersistentVolumeClaim
	for i := range claims {
		c := controllertest.Claim{Name: fmt.Sprintf("c%d", i)}
		if i%2 == 1 {
			c.Mode = corev1.PersistentVolumeBlock
		}
		made = append(made, e.CreateClaim(c))
	}
	for _, c := range made {
		e.WaitBound(c.Name)
	}
	// Larger than any filesystem: refused as infeasible, and retried with
	// backoff, each attempt counted.
	huge := e.CreateClaim(controllertest.Claim{Name: "huge", Size: "1Pi"})
	e.WaitEvent(huge.UID, ReasonProvisioningFailed, "")

	gather := func() metricstest.Families {
		f, err := metricstest.Gather(reg)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := gather()
	ok := f.Value("plinth_operation_duration_seconds", "operation", "provision") -
		f.Value("plinth_operation_errors_total", "operation", "provision")
	if ok != claims {
		t.Errorf("%v successful provisions counted, want %d", ok, claims)
	}
	if got := f.Value("plinth_operation_errors_total", "operation", "provision", "code", metrics.ReasonInfeasible); got < 1 {
		t.Errorf("%v infeasible provisions counted, want at least 1", got)
	}
	if got := f.Value("plinth_workqueue_adds_total", "name", "plinth-provisioner-claims"); got < claims+1 {
		t.Errorf("%v keys added to the claim queue, want at least %d", got, claims+1)
	}

	ctx := context.Background()
	for _, c := range made {
		if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range made {
		id := ownership.VolumeIDFor(c.UID)
		controllertest.Eventually(t, 60*time.Second, "PV "+id+" deleted", func() (bool, error) {
			_, err := e.Client.CoreV1().PersistentVolumes().Get(ctx, id, metav1.GetOptions{})
			return apierrors.IsNotFound(err), err
		})
	}
	f = gather()
	if got := f.Value("plinth_operation_duration_seconds", "operation", "delete"); got != claims {
		t.Errorf("%v deletions counted, want %d", got, claims)
	}
	if got := f.Value("plinth_operation_errors_total", "operation", "delete"); got != 0 {
		t.Errorf("%v failed deletions counted, want 0", got)
	}
}
