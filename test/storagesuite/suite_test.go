package storagesuite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"source.plinth.dev/test/storagesuite/suite"
)

const (
	// focus selects the specs of the driver definition.
	focus = `External.Storage`
	// skip leaves out what does not belong in a run on a shared test host:
	// specs that disrupt the node ([Disruptive]), want the cluster to
	// themselves ([Serial]), take many minutes each ([Slow]), or need a
	// feature gate or an optional cluster component ([Feature:...]), all
	// but the snapshot specs ([Feature:VolumeSnapshotDataSource]: every
	// cluster test/launch starts serves the snapshot API). Then
	// one spec by name, for the test host, not Plinth: "volumeMode should
	// not mount / map unused volumes in a pod" lists the pod's directories
	// under a hard-coded /var/lib/kubelet (launch's kubelet keeps its root
	// below the data filesystem, and -kubelet-root-dir does not reach that
	// spec), from a host-exec pod that enters PID 1's mount namespace with
	// nsenter, which this host refuses even to root ("nsenter: can't open
	// '/rootfs/proc/1/ns/mnt': Permission denied"). It runs, both patterns,
	// on the VM node instead, where PID 1 is plinth-node and
	// /var/lib/kubelet leads to the kubelet's root:
	// TestStorageSuiteUnusedVolumes in test/e2evm (make test-e2e-vm, part
	// of make test). Likewise "should provision correct filesystem size
	// when restoring snapshot to larger size pvc", which compares df in
	// the pod before and after: this host's kernel enforces no XFS project
	// quota, so a volume shows the whole data filesystem's size, and the
	// spec's claim (its source plus 1Gi) does not fit the VM node's 2 GiB
	// data disk, where quotas are enforced (its scheduler finds "not
	// enough free storage"). And the
	// pre-provisioned snapshot pattern: the suite makes its static
	// VolumeSnapshotContent without the snapshot.storage.kubernetes.io/managed-by
	// label, which is how a node learns that a content is its own (a
	// static content must carry it, docs/operating.md), so no node ever
	// acts on it.
	skip = `\[Disruptive\]|\[Serial\]|\[Slow\]` +
		`|\[Feature:(SELinux|VolumeAttributesClass|VolumeSourceXFS|Windows|volumegroupsnapshot)\]` +
		`|volumeMode should not mount / map unused volumes in a pod` +
		`|should provision correct filesystem size when restoring snapshot to larger size pvc` +
		`|\[Testpattern: Pre-provisioned Snapshot`
	// focusEnv replaces focus, to run a few specs while working on them;
	// minPassed then does not apply.
	focusEnv = "PLINTH_STORAGE_SUITE_FOCUS"
	// procsEnv sets the number of parallel ginkgo processes.
	procsEnv = "PLINTH_STORAGE_SUITE_PROCS"
	// defaultProcs: measured on the 2-core host (see docs/testing.md).
	defaultProcs = 2
	// suiteTimeout bounds the whole e2e.test run.
	suiteTimeout = 50 * time.Minute
	// minPassed guards against a run that passes because it ran nothing
	// (a misspelled capability or class name skips whole suites silently).
	minPassed = 40
)

// TestExternalStorage runs the External.Storage specs of e2e.test with
// Plinth's driver definition. It fails when a spec fails, when a spec is
// skipped for a reason not in allowedSkips (each of which names a
// capability Plinth lacks), or when fewer than minPassed specs pass.
func TestExternalStorage(t *testing.T) {
	c := clusterFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout+5*time.Minute)
	defer cancel()
	bin, err := suite.Binaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	specFocus, floor := focus, minPassed
	if v := os.Getenv(focusEnv); v != "" {
		specFocus, floor = v, 0
	}
	procs := defaultProcs
	if v := os.Getenv(procsEnv); v != "" {
		if procs, err = strconv.Atoi(v); err != nil || procs < 1 {
			t.Fatalf("%s=%q: want a positive number", procsEnv, v)
		}
	}

	// Outputs go to the cluster's log directory, which stays when a test
	// fails.
	cfg := suite.Config{
		Bin: bin, Kubeconfig: c.Kubeconfig,
		Focus: specFocus, Skip: skip, Procs: procs, Timeout: suiteTimeout,
		// The framework's idea of the kubelet's root directory (launch
		// keeps it below the data filesystem, not at /var/lib/kubelet).
		KubeletRootDir: c.KubeletRootDir,
		OutDir:         filepath.Join(c.LogDir, "storage-suite"),
	}
	t.Logf("running ginkgo %s (output in %s)", strings.Join(cfg.Args(), " "), cfg.OutDir)
	res, err := suite.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary
	t.Logf("External.Storage with %d process(es): %d specs selected, %d passed, %d failed, %d skipped; wall time %s",
		procs, s.Selected, len(s.Passed), len(s.Failed), len(s.Skipped), res.Wall.Round(time.Second))
	for _, reason := range sortedKeys(s.SkipReasons) {
		t.Logf("skipped %3d: %s", s.SkipReasons[reason], reason)
	}
	for _, f := range s.Failed {
		t.Errorf("FAILED %s\n    %s", f.Name, f.Message)
	}
	for _, sk := range s.Skipped {
		if why := allowedSkip(sk.Message); why == "" {
			t.Errorf("skipped for a reason no missing capability explains: %s\n    %s", sk.Name, sk.Message)
		}
	}
	if len(s.Passed) < floor {
		t.Errorf("only %d specs passed, want at least %d: is the driver definition read right?", len(s.Passed), floor)
	}
	if res.Err != nil && len(s.Failed) == 0 {
		t.Errorf("ginkgo failed (%v) but no spec did; see %s", res.Err, res.Log)
	}
	if t.Failed() {
		t.Logf("full output: %s", res.Log)
	}
	// For the record in go test -v output.
	fmt.Fprintf(os.Stderr, "storage suite: %d passed, %d failed, %d skipped in %s\n", len(s.Passed), len(s.Failed), len(s.Skipped), res.Wall.Round(time.Second))
}
