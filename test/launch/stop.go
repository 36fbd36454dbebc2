package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/launch/host"
)

// stopGrace is how long a component gets between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// stopComponents stops procs newest first and the admission server in its
// place among them: after the node's processes, which write through it,
// and before the control plane, so that its placer and claim labeller
// never call a stopped API server. It returns what failed.
func (c *Cluster) stopComponents(procs []*process) []error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(procs); i > 0; i-- {
		if c.admission != nil && c.admission.after == i {
			add(c.stopAdmission())
		}
		add(procs[i-1].stop(stopGrace))
	}
	add(c.stopAdmission()) // a no-op unless it started before every process
	return errs
}

// Stop tears the cluster down and leaves the host as it found it: pods are
// deleted through the API (so kubelet unmounts volumes and containerd
// removes network namespaces the normal way), components stop in reverse
// order, and a final sweep removes anything left. The work directory keeps
// only logs/. Stop returns an error listing whatever could not be removed.
// It is safe to call more than once.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	procs := append([]*process(nil), c.procs...)
	c.mu.Unlock()

	start := time.Now()
	running := map[string]bool{}
	for _, p := range procs {
		running[p.name] = !p.exited()
	}
	if c.Client != nil && running["kube-apiserver"] && running["kubelet"] {
		if err := c.deletePods(ctx, time.Minute); err != nil {
			c.logf("deleting pods before shutdown: %v (the sweep will clean up)", err)
		}
	}
	for _, err := range c.stopComponents(procs) {
		c.logf("%v", err)
	}

	var errs []error
	if c.Dir != "" {
		// The data filesystem is ours to unmount; anything else still
		// there means a component did not clean up after itself, which is
		// expected only after a crash or a failed pod deletion.
		l := host.FindLeftovers(c.Dir, c.base)
		// kubelet bind-mounts its root directory onto itself and never
		// undoes it; the bridge, cgroups and /var/lib/kubelet always stay.
		l.Mounts = slices.DeleteFunc(l.Mounts, func(m string) bool { return m == c.DataDir || m == c.KubeletRootDir })
		l.Other = nil
		data, _ := loop.Lookup(filepath.Join(c.Dir, "data.img"))
		l.LoopDevices = slices.DeleteFunc(l.LoopDevices, func(dev string) bool {
			return slices.Contains(data, dev)
		})
		if !l.Empty() {
			c.logf("cleaning up after the components: %s", l)
		}
		if err := host.Sweep(c.Dir, c.base); err != nil {
			errs = append(errs, err)
		}
		for dev, holder := range host.PinnedLoops(c.Dir) {
			c.logf("warning: %s stays bound until the mount namespace of %s ends (it copied our mounts); the kernel then detaches it", dev, holder)
		}
		if l := host.FindLeftovers(c.Dir, c.base); !l.Empty() {
			errs = append(errs, fmt.Errorf("left behind on the host: %s", l))
		} else if err := removeAllBut(c.Dir, "logs"); err != nil {
			errs = append(errs, err)
		}
	}
	if c.lock != nil {
		if len(errs) == 0 {
			// Nothing for the next launcher to clean up.
			if err := writeLockState(c.lock, nil); err != nil {
				errs = append(errs, err)
			}
		}
		c.lock.Close() // releases the flock
		c.lock = nil
	}
	c.logf("stopped in %.1fs", time.Since(start).Seconds())
	if len(errs) > 0 {
		return fmt.Errorf("tearing down cluster in %s: %w", c.Dir, errors.Join(errs...))
	}
	return nil
}

// deletePods deletes every pod and waits until kubelet has confirmed each
// one gone, which means their containers, volumes and sandboxes are down.
func (c *Cluster) deletePods(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	grace := int64(1)
	for _, p := range pods.Items {
		err := c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	for {
		pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			n := -1
			if pods != nil {
				n = len(pods.Items)
			}
			return fmt.Errorf("%d pods still exist: %w", n, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// removeAllBut empties dir except for the entry named keep.
func removeAllBut(dir, keep string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cleaning work directory: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if e.Name() == keep || e.Name() == markerFile {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("cleaning work directory: %w", err))
		}
	}
	return errors.Join(errs...)
}
