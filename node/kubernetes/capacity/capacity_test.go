package capacity_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/capacity"
	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/names"
)

// TestNewChecksWiring: a missing dependency fails New, at the node's
// start, instead of a runnable the supervisor restarts forever; the
// optional fields get their defaults. (The fake client is only wiring
// here: nothing is called on it.)
func TestNewChecksWiring(t *testing.T) {
	base := controller.Base{Client: fake.NewClientset(), Driver: names.DriverName, NodeName: "n"}
	vols := &volume.Manager{}
	for _, tc := range []struct {
		name string
		cfg  capacity.Config
		want string
	}{
		{"no client", capacity.Config{Base: controller.Base{Driver: names.DriverName, NodeName: "n"}, Volumes: vols}, "no Kubernetes client"},
		{"no node", capacity.Config{Base: controller.Base{Client: base.Client, Driver: names.DriverName}, Volumes: vols}, "no node name"},
		{"no volumes", capacity.Config{Base: base}, "no volume manager"},
		{"negative interval", capacity.Config{Base: base, Volumes: vols, MinInterval: -time.Second}, "negative interval"},
	} {
		if _, err := capacity.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	p, err := capacity.New(capacity.Config{Base: base, Volumes: vols})
	if err != nil {
		t.Fatal(err)
	}
	if p.Namespace != capacity.DefaultNamespace || p.MinInterval != capacity.DefaultMinInterval || p.Poll != capacity.DefaultPoll {
		t.Errorf("defaults: namespace %q, min interval %s, poll %s", p.Namespace, p.MinInterval, p.Poll)
	}
}

// TestObjectName: one name per node and class, valid for the API server
// whatever the lengths, and never the same for two pairs that concatenate
// alike.
func TestObjectName(t *testing.T) {
	long := strings.Repeat("x", 253)
	a, b := capacity.ObjectName("node-a", "bc"), capacity.ObjectName("node-ab", "c")
	if a == b {
		t.Errorf("node-a/bc and node-ab/c share the name %s", a)
	}
	if n := capacity.ObjectName(long, long); len(n) > 63 || n != capacity.ObjectName(long, long) {
		t.Errorf("name %q: too long or not stable", n)
	}
}
