package nodevm

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
)

// hostLink is the dummy interface that gives the VM node's IP a home on
// this host. The apiserver dials the kubelet at the node's IP (the
// InternalIP the kubelet reports); with the IP on a local interface and
// qemu forwarding <ip>:<kubelet port> into the guest, that dial reaches the
// VM's kubelet, so kubectl logs and exec work as on any node.
const hostLink = "plinth-vm0"

// addHostIP creates hostLink with ip. A leftover link from a run that was
// killed is replaced.
func addHostIP(ctx context.Context, ip net.IP) error {
	_ = ipCmd(ctx, "link", "del", hostLink)
	if err := ipCmd(ctx, "link", "add", hostLink, "type", "dummy"); err != nil {
		return err
	}
	if err := ipCmd(ctx, "addr", "add", ip.String()+"/32", "dev", hostLink); err != nil {
		return err
	}
	return ipCmd(ctx, "link", "set", hostLink, "up")
}

// removeHostIP deletes hostLink.
func removeHostIP(ctx context.Context) error {
	return ipCmd(ctx, "link", "del", hostLink)
}

func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
