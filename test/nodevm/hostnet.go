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

// addHostIP puts ip on lo. One left by a run that was killed is replaced.
func addHostIP(ctx context.Context, ip net.IP) error {
	_ = removeHostIP(ctx, ip)
	return ipCmd(ctx, "addr", "add", ip.String()+"/32", "dev", "lo")
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
