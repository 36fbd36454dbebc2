package e2evm

import (
	"testing"

	"source.plinth.dev/test/e2e/loopreuse"
	"source.plinth.dev/test/images"
)

// TestLoopDetachInPodLeaksNoVolume is issue 34 on the VM node: a pod runs
// `losetup -d` on its own block claim's device, and the next block claim
// published on the node must not become readable through the device node
// that pod keeps (loopreuse.Run), whether the detach comes before the next
// claim exists or while it is being published. No restart variant:
// plinth-node is the node's PID 1 (the host suite restarts it).
func TestLoopDetachInPodLeaksNoVolume(t *testing.T) {
	w := vmWorld(t)
	for _, v := range []struct {
		name string
		opts loopreuse.Options
	}{
		{"plain", loopreuse.Options{}},
		{"during", loopreuse.Options{DetachDuringPublish: true}},
	} {
		t.Run(v.name, func(t *testing.T) {
			v.opts.Name = "loopreuse-" + v.name
			ns := newNamespace(t, w, "loopreuse-"+v.name)
			loopreuse.Run(t, t.Context(), w.cp.Client, ns, images.BusyboxRef, v.opts)
		})
	}
}
