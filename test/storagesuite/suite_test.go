package storagesuite

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testDriver declares Plinth's capabilities to the suite.
//
//go:embed testdriver.yaml
var testDriver []byte

const (
	// focus selects the specs of the driver definition.
	focus = `External.Storage`
	// skip leaves out what does not belong in a run on a shared test host:
	// specs that disrupt the node ([Disruptive]), want the cluster to
	// themselves ([Serial]), take many minutes each ([Slow]), or need a
	// feature gate or an optional cluster component ([Feature:...]). Then
	// two specs by name:
	//   - for a capability Plinth lacks, Immediate binding: a node provisions
	//     only the claims the scheduler gave it (WaitForFirstConsumer, the
	//     selected-node annotation), so a claim of an Immediate class stays
	//     Pending and the spec waits 5 minutes to fail;
	//   - for the test host, not Plinth: "volumeMode should not mount / map
	//     unused volumes in a pod" lists the pod's directories under a
	//     hard-coded /var/lib/kubelet (launch's kubelet keeps its root below
	//     the data filesystem, and -kubelet-root-dir does not reach that
	//     spec), from a host-exec pod that enters PID 1's mount namespace
	//     with nsenter, which this host refuses even to root ("nsenter: can't
	//     open '/rootfs/proc/1/ns/mnt': Permission denied").
	skip = `\[Disruptive\]|\[Serial\]|\[Slow\]|\[Feature:` +
		`|\[Testpattern: Dynamic PV \(immediate binding\)\] topology should provision a volume and schedule a pod with AllowedTopologies` +
		`|volumeMode should not mount / map unused volumes in a pod`
	// focusEnv replaces focus, to run a few specs while working on them;
	// minPassed then does not apply.
	focusEnv = "PLINTH_STORAGE_SUITE_FOCUS"
	// procsEnv sets the number of parallel ginkgo processes.
	procsEnv = "PLINTH_STORAGE_SUITE_PROCS"
	// defaultProcs: measured on the 2-core host (see README).
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
	bin, err := suiteBinaries(ctx)
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
	out := filepath.Join(c.LogDir, "storage-suite")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	driver := filepath.Join(out, "testdriver.yaml")
	if err := os.WriteFile(driver, testDriver, 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(out, "e2e.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()

	args := []string{
		"--procs=" + strconv.Itoa(procs),
		"--focus=" + specFocus,
		"--skip=" + skip,
		"--timeout=" + suiteTimeout.String(),
		"--no-color",
		"--output-dir=" + out,
		"--json-report=report.json",
		filepath.Join(bin, "e2e.test"),
		"--",
		"-kubeconfig=" + c.Kubeconfig,
		// skeleton: a provider without cloud or SSH access ("local" would
		// make specs that need SSH to the node try it).
		"-provider=skeleton",
		"-storage.testdriver=" + driver,
		// The framework's idea of the kubelet's root directory (launch
		// keeps it below the data filesystem, not at /var/lib/kubelet).
		"-kubelet-root-dir=" + c.KubeletRootDir,
		// The framework's log dump on failure reads node logs over SSH.
		"-dump-logs-on-failure=false",
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "ginkgo"), args...)
	cmd.Dir = out
	cmd.Stdout, cmd.Stderr = logFile, logFile
	t.Logf("running %s %s (output: %s)", cmd.Path, strings.Join(args, " "), logPath)
	start := time.Now()
	runErr := cmd.Run()
	wall := time.Since(start)

	rep, err := readReport(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatalf("e2e.test run (%v, %s) left no usable report: %v; see %s", runErr, wall.Round(time.Second), err, logPath)
	}
	s := rep.summarize()
	t.Logf("External.Storage with %d process(es): %d specs selected, %d passed, %d failed, %d skipped; wall time %s",
		procs, s.selected, len(s.passed), len(s.failed), len(s.skipped), wall.Round(time.Second))
	for _, reason := range sortedKeys(s.skipReasons) {
		t.Logf("skipped %3d: %s", s.skipReasons[reason], reason)
	}
	for _, f := range s.failed {
		t.Errorf("FAILED %s\n    %s", f.name, f.message)
	}
	for _, sk := range s.skipped {
		if why := allowedSkip(sk.message); why == "" {
			t.Errorf("skipped for a reason no missing capability explains: %s\n    %s", sk.name, sk.message)
		}
	}
	if len(s.passed) < floor {
		t.Errorf("only %d specs passed, want at least %d: is the driver definition read right?", len(s.passed), floor)
	}
	if runErr != nil && len(s.failed) == 0 {
		t.Errorf("ginkgo failed (%v) but no spec did; see %s", runErr, logPath)
	}
	if t.Failed() {
		t.Logf("full output: %s", logPath)
	}
	// For the record in go test -v output.
	fmt.Fprintf(os.Stderr, "storage suite: %d passed, %d failed, %d skipped in %s\n", len(s.passed), len(s.failed), len(s.skipped), wall.Round(time.Second))
}
