package deploy

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/e2e/loopreuse"
	testimages "source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

// TestLoopDetachInPodLeaksNoVolume is issue 34 with deploy/ and the
// upstream kubelet: a pod runs `losetup -d` on its own block claim's
// device, and the next block claim published on the node must not become
// readable through the device node that pod keeps (loopreuse.Run). The
// upstream kubelet's pseudo-lock (a loop device over the published device
// node) holds the device open, which turns the pod's detach into a detach
// at last close: the node's view in the log shows what held it. It
// installs deploy/ itself, so it runs alone too, and uninstalls after.
func TestLoopDetachInPodLeaksNoVolume(t *testing.T) {
	c := clusterFor(t)
	dir := overlay(t, c)
	kubectl(t, c, "apply", "-k", dir)
	// Registered before Run's cleanups, so it runs after them: the
	// plugin must still be there to unpublish and delete the volumes.
	t.Cleanup(func() { kubectl(t, c, "delete", "-k", dir, "--ignore-not-found", "--wait=true", "--timeout=2m") })
	waitNodeReady(t, c)
	loopreuse.Run(t, t.Context(), c.Client, "default", testimages.BusyboxRef, loopreuse.Options{
		Name: "deploy-loopreuse",
		Node: func() string { return loopsSeen(c) },
	})
}

// loopsSeen lists the loop devices over the node's volume images and the
// kubelet's pseudo-locks over them.
func loopsSeen(c *launch.Cluster) string {
	all, err := loop.Bindings()
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, b := range all {
		switch {
		case strings.HasPrefix(b.Backing, filepath.Join(c.DataDir, "volumes")+"/"):
			out = append(out, fmt.Sprintf("%s over %s", b.Path(), filepath.Base(b.Backing)))
		case strings.HasPrefix(b.Backing, c.KubeletRootDir+"/"), strings.HasPrefix(b.Backing, "/dev/loop"):
			out = append(out, fmt.Sprintf("%s over %s (the kubelet's pseudo-lock)", b.Path(), b.Backing))
		}
	}
	return "[" + strings.Join(out, ", ") + "]"
}
