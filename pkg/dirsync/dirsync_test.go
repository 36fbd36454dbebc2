package dirsync

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSync(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "entry"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Sync(dir); err != nil {
		t.Errorf("Sync(%s) = %v", dir, err)
	}
}

func TestSyncFailures(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	if err := Sync(missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Sync of a missing directory = %v, want ErrNotExist naming %s", err, missing)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Sync(file); !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("Sync of a regular file = %v, want ENOTDIR", err)
	}
}
