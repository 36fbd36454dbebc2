package main

import (
	"testing"

	"source.plinth.dev/build/nodeimage"
)

// A program added to the image without a probe would only fail in the
// booted VM; this says so on the host.
func TestEveryProgramHasAProbe(t *testing.T) {
	cs, unprobed := checks()
	if len(unprobed) != 0 {
		t.Errorf("programs of the image without a probe: %v", unprobed)
	}
	if want := len(nodeimage.DebianPrograms()) + 1 + len(nodeimage.BusyboxLinks); len(cs) != want {
		t.Errorf("%d checks, want %d (the Debian programs, the kubelet, busybox's links)", len(cs), want)
	}
	for _, c := range cs {
		if c.want == "" {
			t.Errorf("%s: the probe names no word its output must contain", c.path)
		}
	}
}
