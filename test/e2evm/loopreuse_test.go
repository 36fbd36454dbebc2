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
// plinth-node is the node's PID 1 (the host suite restarts it). Pod A has
// CAP_SYS_ADMIN, as the node's runc wrapper refuses the detach to any pod
// without it (TestPodCannotDetachItsLoopDevice): this tests the wall
// behind, plinth-node's hold on the device.
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
			v.opts.SysAdmin = true
			ns := newNamespace(t, w, "loopreuse-"+v.name)
			loopreuse.Run(t, t.Context(), w.cp.Client, ns, images.BusyboxRef, v.opts)
		})
	}
}

// TestPodCannotDetachItsLoopDevice is the loop half of issue 37 on the VM
// node: runc runs through plinth-node's wrapper (package runcguard), so a
// pod without CAP_SYS_ADMIN that runs `losetup -d` on its own block
// claim's device gets EPERM, whatever seccomp profile it asks for, and
// its device keeps serving its image (loopreuse.DetachRefused).
func TestPodCannotDetachItsLoopDevice(t *testing.T) {
	w := vmWorld(t)
	ns := newNamespace(t, w, "detach-refused")
	for _, l := range loopreuse.DetachRefused(t, t.Context(), w.cp.Client, ns, images.BusyboxRef, "detach") {
		t.Log(l)
	}
}
