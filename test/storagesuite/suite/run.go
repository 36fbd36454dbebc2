package suite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Config is one run of e2e.test under ginkgo.
type Config struct {
	// Bin is the directory of Binaries.
	Bin string
	// Kubeconfig is the cluster's admin kubeconfig.
	Kubeconfig string
	// Focus and Skip select the specs (ginkgo's --focus and --skip; an
	// empty Skip skips nothing).
	Focus, Skip string
	// Procs is the number of parallel ginkgo processes (at least 1).
	Procs int
	// Timeout bounds the whole run (ginkgo's --timeout).
	Timeout time.Duration
	// KubeletRootDir is the framework's idea of the kubelet's root
	// directory; empty leaves e2e.test's default, /var/lib/kubelet.
	KubeletRootDir string
	// OutDir receives the driver definition, e2e.log and report.json. It
	// is created if missing.
	OutDir string
}

// Result is what a run left.
type Result struct {
	Summary
	// Wall is the run's wall time.
	Wall time.Duration
	// Err is ginkgo's exit error: set when a spec failed, or when the run
	// itself did.
	Err error
	// Log is the path of ginkgo's output.
	Log string
}

// Args is ginkgo's command line for the run, the driver definition in
// OutDir.
func (cfg Config) Args() []string {
	args := []string{
		"--procs=" + strconv.Itoa(cfg.Procs),
		"--focus=" + cfg.Focus,
	}
	if cfg.Skip != "" {
		args = append(args, "--skip="+cfg.Skip)
	}
	args = append(args,
		"--timeout="+cfg.Timeout.String(),
		"--no-color",
		"--output-dir="+cfg.OutDir,
		"--json-report=report.json",
		filepath.Join(cfg.Bin, "e2e.test"),
		"--",
		"-kubeconfig="+cfg.Kubeconfig,
		// skeleton: a provider without cloud or SSH access ("local" would
		// make specs that need SSH to the node try it).
		"-provider=skeleton",
		"-storage.testdriver="+cfg.driverPath(),
		// The framework's log dump on failure reads node logs over SSH.
		"-dump-logs-on-failure=false",
	)
	if cfg.KubeletRootDir != "" {
		args = append(args, "-kubelet-root-dir="+cfg.KubeletRootDir)
	}
	return args
}

func (cfg Config) driverPath() string { return filepath.Join(cfg.OutDir, "testdriver.yaml") }

// Run runs e2e.test with Plinth's driver definition and returns the
// summary of its report. An error means the run left no usable report.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return Result{}, fmt.Errorf("suite output directory: %w", err)
	}
	if err := WriteDriver(cfg.driverPath()); err != nil {
		return Result{}, err
	}
	res := Result{Log: filepath.Join(cfg.OutDir, "e2e.log")}
	logFile, err := os.Create(res.Log)
	if err != nil {
		return Result{}, fmt.Errorf("suite log: %w", err)
	}
	defer logFile.Close()
	// e2e.test leaves temporary files behind (the kubectl preferences
	// directories test-kuberc*, one per worker); give it a temporary
	// directory of its own and remove that afterwards.
	tmp, err := os.MkdirTemp("", "plinth-storagesuite-")
	if err != nil {
		return Result{}, fmt.Errorf("suite temporary directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, filepath.Join(cfg.Bin, "ginkgo"), cfg.Args()...)
	cmd.Dir = cfg.OutDir
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	res.Err = cmd.Run()
	res.Wall = time.Since(start)

	rep, err := readReport(filepath.Join(cfg.OutDir, "report.json"))
	if err != nil {
		return res, fmt.Errorf("e2e.test run (%v, %s) left no usable report: %w; see %s", res.Err, res.Wall.Round(time.Second), err, res.Log)
	}
	res.Summary = rep.summarize()
	return res, nil
}
