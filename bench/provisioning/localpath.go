package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"source.plinth.dev/bench/localpath"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

// localPath is a running local-path-provisioner.
type localPath struct {
	cmd  *exec.Cmd
	done chan error
}

// startLocalPath creates local-path's objects in the cluster and starts
// the provisioner binary; its volumes go below the node's data filesystem,
// the same XFS Plinth's volumes are on.
func startLocalPath(ctx context.Context, c *launch.Cluster, binary string) (*localPath, error) {
	if err := tagBusybox(ctx, c); err != nil {
		return nil, err
	}
	if err := localpath.Install(ctx, c.Client, filepath.Join(c.DataDir, "local-path")); err != nil {
		return nil, err
	}

	log, err := os.Create(filepath.Join(c.LogDir, "local-path-provisioner.log"))
	if err != nil {
		return nil, fmt.Errorf("local-path: %w", err)
	}
	cmd := exec.Command(binary, append([]string{"--debug"}, localpath.Args(c.Kubeconfig)...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("local-path: starting %s: %w", binary, err)
	}
	lp := &localPath{cmd: cmd, done: make(chan error, 1)}
	go func() { lp.done <- cmd.Wait(); log.Close() }()
	return lp, nil
}

// failed returns why the provisioner exited, or nil while it runs.
func (lp *localPath) failed() error {
	select {
	case err := <-lp.done:
		lp.done <- err
		return fmt.Errorf("local-path-provisioner exited: %v", err)
	default:
		return nil
	}
}

// stop ends the provisioner: SIGTERM, then SIGKILL after 10 s.
func (lp *localPath) stop() error {
	if err := lp.failed(); err != nil {
		return err
	}
	_ = lp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-lp.done:
	case <-time.After(10 * time.Second):
		_ = lp.cmd.Process.Kill()
		<-lp.done
	}
	return nil
}

// tagBusybox makes the project's busybox image, which the launcher
// imported, answer to the name local-path's helper pods use, as a second
// tag of the same image in containerd's CRI namespace (what `ctr images
// tag` or `docker tag` before `kind load` does).
func tagBusybox(ctx context.Context, c *launch.Cluster) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", c.ContainerdSocket, "--namespace", "k8s.io",
		"images", "tag", "--force", images.BusyboxRef, localpath.HelperImage).CombinedOutput()
	if err != nil {
		return fmt.Errorf("tagging %s as %s: %w: %s", images.BusyboxRef, localpath.HelperImage, err, strings.TrimSpace(string(out)))
	}
	return nil
}
