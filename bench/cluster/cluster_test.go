package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestWorkDirKeepsLogsOfAFailedRun: a failed run's work directory is what
// tells why it failed, so only a successful one is removed.
func TestWorkDirKeepsLogsOfAFailedRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		kept bool
	}{
		{"success", nil, false},
		{"failure", errors.New("boom"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "results")
			tmp, done, err := WorkDir("test", "wd-", out)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(tmp) })
			if fi, err := os.Stat(out); err != nil || !fi.IsDir() {
				t.Fatalf("results directory %s not created: %v", out, err)
			}
			if filepath.Base(tmp)[:3] != "wd-" {
				t.Errorf("work directory %s does not start with the prefix", tmp)
			}
			if err := os.WriteFile(filepath.Join(tmp, "x.log"), []byte("log"), 0o644); err != nil {
				t.Fatal(err)
			}
			done(tc.err)
			_, err = os.Stat(filepath.Join(tmp, "x.log"))
			if kept := err == nil; kept != tc.kept {
				t.Errorf("after done(%v): log kept %v, want %v", tc.err, kept, tc.kept)
			}
		})
	}
}
