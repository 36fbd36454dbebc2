package csi

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/mountinfo/mounttest"
	"source.plinth.dev/test/ktest"
	"source.plinth.dev/test/volumetest"
)

// Environment of the kernel VM that names the csi-sanity binary
// (test-kernel.sh brings it in with ktest's -with).
const envSanityBin = "PLINTH_CSI_SANITY_BIN"

// TestSanityWithEnforcedQuotas runs csi-sanity, the CSI community's
// conformance suite, against `plinth-node csi-serve` on an XFS mounted
// with prjquota, for mount and for block access. `make test-sanity` runs
// the same suite on the host, whose kernel has no XFS quota support, so
// there the filesystem volumes' capacity is not enforced; only here do
// CreateVolume, ControllerExpandVolume and DeleteVolume set and remove
// real project quotas under csi-sanity's calls. csi-serve is started
// without --allow-unenforced-capacity, so it would refuse to start on a
// filesystem without quotas. Afterwards nothing of the run may be left:
// no volume, no snapshot, no state record, no project ID claim, no quota
// record with limits, no loop device on an image, no mount in the kubelet
// directory.
func TestSanityWithEnforcedQuotas(t *testing.T) {
	ktest.RequireVM(t)
	sanity, node := os.Getenv(envSanityBin), os.Getenv("PLINTH_NODE_BIN")
	if sanity == "" || node == "" {
		t.Fatalf("the kernel VM must bring csi-sanity (%s=%q) and a static plinth-node (PLINTH_NODE_BIN=%q); see build/scripts/test-kernel.sh", envSanityBin, sanity, node)
	}
	dataDir := ktest.TempDir(t, "xfs")
	data, qerr := volumetest.DataDir(t, dataDir)
	if qerr != nil {
		t.Fatalf("the VM's xfs disk must enforce project quotas: %v", qerr)
	}
	quotasBefore := limitedVolumeProjects(t, data)
	// Short paths: a unix socket's path is limited to 107 bytes.
	work, err := os.MkdirTemp("/tmp", "sanity-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(work) })
	kubelet := filepath.Join(work, "kubelet")
	if err := os.MkdirAll(filepath.Join(kubelet, "pods"), 0o750); err != nil {
		t.Fatal(err)
	}
	csiSock, ctrlSock := filepath.Join(work, "csi.sock"), filepath.Join(work, "ctrl.sock")

	var serverLog bytes.Buffer
	server := exec.Command(node, "csi-serve",
		"--endpoint", "unix://"+csiSock, "--controller-endpoint", "unix://"+ctrlSock,
		"--data-dir", dataDir, "--kubelet-dir", kubelet, "--ephemeral-dir", filepath.Join(work, "ephemeral"),
		"--node-name", "sanity-node")
	server.Stdout, server.Stderr = &serverLog, &serverLog
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = server.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("csi-serve log:\n%s", serverLog.String())
		}
	})
	waitForSockets(t, exited, csiSock, ctrlSock)

	for _, access := range []string{"mount", "block"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		// Target and staging paths below the kubelet directory, as the
		// plugin demands; 16 MiB volumes expanded to 32 MiB, well inside
		// the 512 MiB disk.
		cmd := exec.CommandContext(ctx, sanity,
			"-csi.endpoint", "unix://"+csiSock,
			"-csi.controllerendpoint", "unix://"+ctrlSock,
			"-csi.mountdir", filepath.Join(kubelet, "pods", "sanity-target"),
			"-csi.stagingdir", filepath.Join(kubelet, "pods", "sanity-staging"),
			"-csi.testvolumesize", fmt.Sprint(16<<20),
			"-csi.testvolumeexpandsize", fmt.Sprint(32<<20),
			"-csi.testvolumeaccesstype", access,
			"-ginkgo.no-color")
		out, err := cmd.CombinedOutput()
		cancel()
		summary := lastLineWith(out, "Passed")
		if err != nil {
			t.Errorf("csi-sanity, %s access: %v\n%s", access, err, out)
			continue
		}
		t.Logf("csi-sanity, %s access, quotas enforced: %s", access, summary)
	}

	assertNothingLeft(t, data, kubelet, filepath.Join(work, "ephemeral"), quotasBefore)

	if err := server.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := <-exited; err != nil {
		t.Errorf("csi-serve did not exit cleanly on SIGTERM: %v", err)
	}
}

// waitForSockets waits for csi-serve to listen on both sockets, failing
// the test if it exits first.
func waitForSockets(t *testing.T, exited <-chan error, socks ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ready := true
		for _, s := range socks {
			if fi, err := os.Stat(s); err != nil || fi.Mode().Type() != os.ModeSocket {
				ready = false
			}
		}
		if ready {
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("csi-serve exited before listening: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("csi-serve did not listen on %v within a minute", socks)
		}
	}
}

// limitedVolumeProjects lists the quota records with limits in the project
// ID range of volumes on data's filesystem. The VM's disk is shared with
// other tests, so a leak is a record that was not there before.
func limitedVolumeProjects(t *testing.T, data *localstorage.DataDirectory) map[uint32]fsquota.Quota {
	t.Helper()
	ps, err := volumetest.LimitedProjects(data.Volumes.FullPath(), volume.FirstProjectID, volume.LastProjectID)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// assertNothingLeft fails the test for every trace csi-sanity's volumes
// and snapshots left in the data directory, the quota table, the loop
// devices, the kubelet directory and the plugin's publication records.
func assertNothingLeft(t *testing.T, data *localstorage.DataDirectory, kubelet, ephemeral string, quotasBefore map[uint32]fsquota.Quota) {
	t.Helper()
	for _, d := range []string{data.Volumes.FullPath(), data.Snapshots.FullPath(), data.State.Projects.FullPath(), data.State.Operations.FullPath(),
		data.State.Records.FullPath(), filepath.Join(ephemeral, "csi", "publications")} {
		names, err := os.ReadDir(d)
		if err != nil {
			t.Errorf("listing %s: %v", d, err)
			continue
		}
		for _, n := range names {
			t.Errorf("left after csi-sanity: %s", filepath.Join(d, n.Name()))
		}
	}
	for id, q := range limitedVolumeProjects(t, data) {
		if b, ok := quotasBefore[id]; !ok || b.Limits != q.Limits {
			t.Errorf("left after csi-sanity: a quota on project %d limited to %d bytes", id, q.Limits.Bytes)
		}
	}
	bindings, err := loop.Bindings()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings {
		if strings.HasPrefix(b.Backing, data.Volumes.FullPath()+"/") {
			t.Errorf("left after csi-sanity: loop device %s on %s (deleted: %v)", b.Path(), b.Backing, b.Deleted)
		}
	}
	if n := mounttest.Mentions(t, kubelet); n != 0 {
		t.Errorf("left after csi-sanity: %d mounts in the kubelet directory %s", n, kubelet)
	}
}

// lastLineWith returns the last line of out that contains s, or "".
func lastLineWith(out []byte, s string) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}
