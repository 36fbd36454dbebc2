package launch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"source.plinth.dev/test/launch/host"
)

func TestPrepareDirRefusesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	precious := filepath.Join(dir, "precious")
	if err := os.WriteFile(precious, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := prepareDir(dir, hostOwned)
	if err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("prepareDir on a foreign directory = %v, want a refusal", err)
	}
	if data, err := os.ReadFile(precious); err != nil || string(data) != "keep me" {
		t.Fatalf("foreign file damaged: %q, %v", data, err)
	}
}

// hostOwned is a baseline in which all host-wide state predates the test,
// so a sweep touches nothing outside the test's directory (a cluster may be
// running on this host while unit tests run).
var hostOwned = host.Baseline{Kubepods: true, KubeletDir: true, BridgeExists: true, RunContainerd: true}

func TestPrepareDirWipesOldWorkDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := prepareDir(dir, hostOwned); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old-state")
	if err := os.WriteFile(old, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := prepareDir(dir, hostOwned); err != nil {
		t.Fatalf("preparing an old work directory again: %v", err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("old state survived: %v", err)
	}
}

func TestBusyErrorNamesTheOtherCluster(t *testing.T) {
	err := (&BusyError{PID: 42, Dir: "/tmp/plinth-run"}).Error()
	for _, want := range []string{"already running", "42", "/tmp/plinth-run"} {
		if !strings.Contains(err, want) {
			t.Errorf("BusyError %q lacks %q", err, want)
		}
	}
}

// TestRepoRootFollowsGoModSymlink: under Bazel the test runs in a runfiles
// tree where go.mod is a symlink into the checkout; the root is the
// checkout, where the sources to build the images are.
func TestRepoRootFollowsGoModSymlink(t *testing.T) {
	checkout, runfiles := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(checkout, "go.mod"), []byte("module source.plinth.dev\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(checkout, "go.mod"), filepath.Join(runfiles, "go.mod")); err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(runfiles, "test", "e2e")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := RepoRoot(pkg)
	want, _ := filepath.EvalSymlinks(checkout)
	if err != nil || got != want {
		t.Fatalf("RepoRoot(%s) = %q, %v; want the checkout %s", pkg, got, err, want)
	}
}
