package e2evm

import (
	"testing"

	"source.plinth.dev/test/nodevm"
)

// TestStaleFoundLineRefused keeps the negative control of
// TestVolumesSurviveReboot's power-cut half without a VM: a log read after
// the cut can still be the pod's from before it (the kubelet serves the
// earlier container's until the new one runs), and its FOUND line, with
// the very markers wanted, must not pass for the new boot's. (Run once in
// the VM with the pod made to print the boot ID of its first FOUND line
// ever after, the test failed so; docs/testing.md.)
func TestStaleFoundLineRefused(t *testing.T) {
	const (
		before  = "3f0c8a1e-7d52-4b1a-9e6f-2c4d8b0a1f37"
		after   = "b6e1d4c2-0a9f-4e38-8c17-5d2f9a3e6b40"
		markers = "fs=fs-1 a=blka-2 b=blkb-3"
	)
	// Written out, as the pod's script prints them, not by foundPrefix.
	stale := "WROTE\nFOUND boot=" + before + " " + markers + "\n"
	for _, boot := range []string{after, ""} {
		if l, ok := nodevm.LineWithPrefix(stale, nodevm.FoundPrefix(boot)); ok {
			t.Errorf("log from before the cut, waiting for boot %q: took %q", boot, l)
		}
	}
	fresh := "FOUND boot=" + after + " " + markers
	if l, ok := nodevm.LineWithPrefix(stale+fresh+"\n", nodevm.FoundPrefix(after)); !ok || l != fresh {
		t.Errorf("log with the new boot's line: got %q, %v; want %q", l, ok, fresh)
	}
}
