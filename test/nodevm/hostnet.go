package nodevm

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
)

// The apiserver dials the kubelet at the node's IP (the InternalIP the
// kubelet reports). With that IP on this host's lo and qemu forwarding
// <ip>:<kubelet port> into the guest, the dial reaches the VM's kubelet, so
// kubectl logs and exec work as on any node. lo, because every kernel has
// it (this host's has no dummy interfaces) and nothing routes there from
// outside.

//
// The same IP is on the guest's lo (the kubelet insists on a node IP of its
// own), so a connection from this host must not carry it as its source:
// qemu passes the peer's address on to the guest, whose answer would then
// go to its own lo. Only a peer on 127.0.0.0/8 is shown to the guest as
// the host (10.0.2.2), reachable through eth0. So the local route of ip
// gets 127.0.0.1 as its preferred source, and every connection from this
// host to ip comes from there.

// addHostIP puts ip on lo, with 127.0.0.1 as the source of connections to
// it. One left by a run that was killed is replaced.
func addHostIP(ctx context.Context, ip net.IP) error {
	_ = removeHostIP(ctx, ip)
	if err := ipCmd(ctx, "addr", "add", ip.String()+"/32", "dev", "lo"); err != nil {
		return err
	}
	return ipCmd(ctx, "route", "replace", "local", ip.String(), "dev", "lo", "proto", "kernel", "scope", "host", "src", "127.0.0.1", "table", "local")
}

// removeHostIP takes ip off lo.
func removeHostIP(ctx context.Context, ip net.IP) error {
	return ipCmd(ctx, "addr", "del", ip.String()+"/32", "dev", "lo")
}

func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
