package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/test/nodevm"
)

// probe is the probe pod of one configuration, running on the node.
type probe struct {
	ns, pod string
	markers nodevm.ProbeMarkers
}

func configName(claims bool) string {
	if claims {
		return "claims"
	}
	return "no-claims"
}

// startProbe creates the probe (with its claims, or with an emptyDir) in a
// namespace of its own, and waits until it has written its markers.
func startProbe(ctx context.Context, w *world, claims bool) (*probe, error) {
	cs := w.cp.Client
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-" + configName(claims)},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating the probe's namespace: %w", err)
	}
	p := &probe{ns: ns.Name, pod: "probe", markers: nodevm.ProbeMarkers{FS: "fs-" + token()}}
	if claims {
		p.markers.A, p.markers.B = "blka-"+token(), "blkb-"+token()
		for _, c := range nodevm.ProbeClaims() {
			if _, err := cs.CoreV1().PersistentVolumeClaims(p.ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
				return nil, fmt.Errorf("creating claim %s: %w", c.Name, err)
			}
		}
	}
	if _, err := cs.CoreV1().Pods(p.ns).Create(ctx, nodevm.ProbePod(p.pod, p.markers, claims), metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating the probe: %w", err)
	}
	if _, err := nodevm.WaitLog(ctx, cs, p.ns, p.pod, "WROTE", false, 5*time.Minute); err != nil {
		return nil, err
	}
	return p, nil
}

// check fails unless line (the probe's FOUND line after prefix and the
// runtime's timestamp) shows the markers it wrote.
func (p *probe) check(line, prefix string) error {
	_, rest, _ := cutWord(line)
	if want := prefix + p.markers.Found(); rest != want {
		return fmt.Errorf("the probe read %q, want %q", rest, want)
	}
	return nil
}

// stop deletes the probe's namespace and waits until its pod is gone from
// the node (and its claims' volumes with it), so that the next
// configuration's node runs nothing of this one.
func (p *probe) stop(ctx context.Context, w *world) error {
	cs := w.cp.Client
	if err := cs.CoreV1().Namespaces().Delete(ctx, p.ns, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the probe's namespace: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		_, err := cs.CoreV1().Namespaces().Get(ctx, p.ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the probe's namespace %s is still there: %w", p.ns, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func token() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
