package csi

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/loop/looptest"
)

// loopState of the publication at target, as the plugin would judge it.
func (e *env) loopState(target string) loopState {
	e.t.Helper()
	p := e.srv.store.get(target)
	if p == nil || p.Loop == nil {
		e.t.Fatalf("no block publication at %s", target)
	}
	_, image, err := e.volumes.Locate(context.Background(), p.VolumeID)
	if err != nil {
		e.t.Fatal(err)
	}
	d, state := inspectLoop(p, image)
	if d != nil {
		d.Close()
	}
	return state
}

// waitFree waits until loopN has no backing file (an autoclear detach
// ends asynchronously).
func waitFree(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat("/sys/block/loop" + itoa(n) + "/loop/backing_file"); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("loop%d is still bound", n)
		}
	}
}

// TestTenantCannotFreeItsLoopNumber is issue 34 at the plugin: the pod
// given volume a's device clears it (losetup -d). The device stays bound to
// a's image, the next block volume gets another number, and the pod's
// mark is taken back when the plugin next checks the publication. The
// negative control is TestTenantFreesAnUnheldDevice in pkg/loop: without
// the plugin's hold the same clear frees the number.
func TestTenantCannotFreeItsLoopNumber(t *testing.T) {
	e := newEnv(t, "")
	e.create("a", volume.Block, MiB)
	e.create("b", volume.Block, MiB)
	ta, tb := e.target("a"), e.target("b")
	if err := e.publish("a", ta, volume.Block, false); err != nil {
		t.Fatal(err)
	}
	n := e.srv.store.get(ta).Loop.Number
	if err := looptest.Clear(ta); err != nil {
		t.Fatal(err)
	}
	if st := e.loopState(ta); st != loopOwn {
		t.Fatalf("after the tenant's clear loop%d is %v, want it still serving volume a", n, st)
	}
	if err := e.publish("b", tb, volume.Block, false); err != nil {
		t.Fatal(err)
	}
	if m := e.srv.store.get(tb).Loop.Number; m == n {
		t.Fatalf("volume b was published on loop%d, the number the pod of volume a holds", m)
	}
	// The kubelet's retry of a's publish takes the mark back, so the
	// device also outlives the node agent's process.
	if err := e.publish("a", ta, volume.Block, false); err != nil {
		t.Fatal(err)
	}
	d, err := loop.Open(ta)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if f, err := d.Flags(); err != nil || f.Autoclear {
		t.Errorf("loop%d after the retried publish: flags %+v (%v), want autoclear taken back", n, f, err)
	}
}

// TestReservedAcrossRestart: the tenant clears its device while the node
// agent is down (nothing holds it, so it is freed at once). Another volume
// published before the agent has checked its records (the reservation
// alone) is given another number, and the restart binds volume a's image
// to its number again, so the pod's node reaches its own data.
func TestReservedAcrossRestart(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	e.create("a", volume.Block, MiB)
	e.create("c", volume.Block, MiB)
	ta, tc := e.target("a"), e.target("c")
	if err := e.publish("a", ta, volume.Block, false); err != nil {
		t.Fatal(err)
	}
	n := e.srv.store.get(ta).Loop.Number
	e.die()
	if err := looptest.Clear(ta); err != nil {
		t.Fatal(err)
	}
	waitFree(t, n)
	h, err := e.srv.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "a"})
	if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) != 1 {
		t.Errorf("health of the publication whose device was freed: %v (%v), want one problem", h, err)
	}
	if err := e.publish("c", tc, volume.Block, false); err != nil {
		t.Fatal(err)
	}
	if m := e.srv.store.get(tc).Loop.Number; m == n {
		t.Fatalf("volume c was published on loop%d, reserved for the pod of volume a", m)
	}
	e.restart()
	if st := e.loopState(ta); st != loopOwn {
		t.Fatalf("after the restart loop%d is %v, want it serving volume a again", n, st)
	}
	if p := e.srv.store.get(ta); p.Loop.Number != n || !isBlockNode(ta, p.Loop.Rdev) {
		t.Errorf("publication after the restart: %+v, want loop%d with its node at the target", p.Loop, n)
	}
	h, err = e.srv.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "a"})
	if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) != 0 {
		t.Errorf("health after the restart: %v (%v), want healthy", h, err)
	}
}
