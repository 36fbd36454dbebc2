// Package await is how the cluster suites (test/e2e on the host, test/e2evm
// with a VM node) wait for the cluster to reach a state, and what they
// report when it does not: polling a condition against a deadline, and the
// Events of the object that is late, which usually say why.
package await

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// interval is how often For asks again: quick enough that a suite does not
// idle after the state is reached, slow enough not to load the API server.
const interval = 200 * time.Millisecond

// For polls cond until it holds. When timeout passes or ctx ends first, t
// fails with what cond said last: its error is the reason it does not hold
// yet (a failed request or a description of the state seen), not a fault.
func For(t testing.TB, ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting %v for %s: gave up; last: %v", timeout, what, why)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last: %v", what, ctx.Err(), why)
		case <-time.After(interval):
		}
	}
}

// Events lists the Events of the object called name in ns (a pod, a claim)
// on one line, for a failure message. It is best effort: a failed listing
// is reported in the returned text, as the failure it decorates matters
// more. It is usually called because ctx ended, so it lists under a short
// deadline of its own that keeps ctx's values but not its end.
func Events(ctx context.Context, client kubernetes.Interface, ns, name string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return fmt.Sprintf("(listing events: %v)", err)
	}
	out := make([]string, 0, len(evs.Items))
	for _, e := range evs.Items {
		out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
	}
	return "[" + strings.Join(out, "; ") + "]"
}
