package launch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BinEnv names the environment variable that points at prebuilt Kubernetes
// binaries (what third_party/kubernetes/build.sh prints). The make targets
// set it; without it, KubernetesBinaries runs the build script itself.
const BinEnv = "PLINTH_K8S_BIN"

// KubernetesBinaries returns the directory of the Kubernetes binaries:
// $PLINTH_K8S_BIN, or else the output of third_party/kubernetes/build.sh,
// which is cached and takes seconds when warm (about 10 minutes cold; its
// progress goes to log).
func KubernetesBinaries(ctx context.Context, log io.Writer) (string, error) {
	return prebuiltOrBuild(ctx, log, BinEnv, "kubernetes")
}

// prebuiltOrBuild returns the directory the environment variable env
// names, or else runs third_party/<name>/build.sh, which builds (or finds
// in its cache) what it builds and prints the output directory last.
func prebuiltOrBuild(ctx context.Context, log io.Writer, env, name string) (string, error) {
	if dir := os.Getenv(env); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot(".")
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, "third_party", name, "build.sh"))
	cmd.Stdout = &out
	cmd.Stderr = log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("running third_party/%s/build.sh: %w", name, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
}

// RepoRoot finds the checkout of the main module (source.plinth.dev) at or
// above dir; tests run in their package directory, commands anywhere below.
func RepoRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("finding repository root: %w", err)
	}
	for {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && moduleName(data) == "source.plinth.dev" {
			// Under Bazel, go.mod is a runfile: a symlink into the
			// checkout, where the sources are.
			real, err := filepath.EvalSymlinks(filepath.Join(d, "go.mod"))
			if err != nil {
				return "", fmt.Errorf("finding repository root: %w", err)
			}
			return filepath.Dir(real), nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("finding repository root: no go.mod of source.plinth.dev at or above %s", dir)
		}
		d = parent
	}
}

func moduleName(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}
