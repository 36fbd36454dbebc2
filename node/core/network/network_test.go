package network

import (
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// inNetns runs f on a thread of its own in a fresh network namespace with
// a veth pair eth0/peer0 (what a VM's uplink looks like to Configure). The
// thread is never unlocked, so the runtime throws it away afterwards and
// no other goroutine ever runs in the namespace.
func inNetns(t *testing.T, f func(ip func(args ...string) string)) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; this test must not skip there")
		}
		t.Skip("needs root")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		// Commands started from this locked thread inherit its namespace.
		ip := func(args ...string) string {
			out, err := exec.Command("ip", args...).CombinedOutput()
			if err != nil {
				t.Errorf("ip %v: %v\n%s", args, err, out)
			}
			return string(out)
		}
		ip("link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
		ip("link", "set", "peer0", "up")
		f(ip)
	}()
	<-done
}

func TestConfigure(t *testing.T) {
	inNetns(t, func(ip func(args ...string) string) {
		c := Config{
			Uplink:  "eth0",
			Address: netip.MustParsePrefix("10.0.2.15/24"),
			Gateway: netip.MustParseAddr("10.0.2.2"),
			NodeIP:  netip.MustParseAddr("10.0.77.2"),
		}
		// Twice: the second run finds everything in place and succeeds.
		for i := range 2 {
			if err := Configure(c); err != nil {
				t.Errorf("Configure #%d: %v", i+1, err)
				return
			}
		}
		addrs := ip("-4", "-o", "addr", "show")
		for _, want := range []string{"lo    inet 127.0.0.1/8", "lo    inet 10.0.77.2/32", "eth0    inet 10.0.2.15/24"} {
			if !strings.Contains(strings.Join(strings.Fields(addrs), "    "), strings.Join(strings.Fields(want), "    ")) {
				t.Errorf("addresses lack %q:\n%s", want, addrs)
			}
		}
		if routes := ip("-4", "route", "show", "default"); !strings.Contains(routes, "default via 10.0.2.2 dev eth0") {
			t.Errorf("default route missing:\n%s", routes)
		}
		if links := ip("-o", "link", "show", "lo"); !strings.Contains(links, "UP") {
			t.Errorf("lo not up: %s", links)
		}
	})
}

func TestConfigureErrors(t *testing.T) {
	inNetns(t, func(ip func(args ...string) string) {
		err := Configure(Config{Uplink: "eth9", Address: netip.MustParsePrefix("10.0.2.15/24"), Gateway: netip.MustParseAddr("10.0.2.2")})
		if err == nil || !strings.Contains(err.Error(), "uplink eth9") || !strings.Contains(err.Error(), "eth0") {
			t.Errorf("missing uplink: %v, want an error naming it and the links there are", err)
		}
		// A gateway off the uplink's subnet: the kernel refuses the route,
		// and the error says which step failed.
		err = Configure(Config{Uplink: "eth0", Address: netip.MustParsePrefix("10.0.2.15/24"), Gateway: netip.MustParseAddr("192.168.9.1")})
		if err == nil || !strings.Contains(err.Error(), "adding default route via 192.168.9.1") {
			t.Errorf("unreachable gateway: %v", err)
		}
	})
}
