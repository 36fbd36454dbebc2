package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"source.plinth.dev/node/core/localstorage"
)

func TestParseLeftovers(t *testing.T) {
	s, err := parseLeftovers("/data,/data/kubelet,90s,pvc-a+pvc-b,uid-1")
	if err != nil {
		t.Fatal(err)
	}
	if s.data != "/data" || s.kubelet != "/data/kubelet" || s.wait != 90*time.Second || s.mountsOf != "kubelet" ||
		!slices.Equal(s.volumes, []string{"pvc-a", "pvc-b"}) || !slices.Equal(s.keys, []string{"uid-1"}) {
		t.Fatalf("parsed %+v", s)
	}
	for _, bad := range []string{"", "/data", "/data,/k,1s", "/data,/k,soon,pvc-a", ",/k,1s,pvc-a", "/data,/k,1s,"} {
		if _, err := parseLeftovers(bad); err == nil {
			t.Errorf("parseLeftovers(%q) accepted it", bad)
		}
	}
}

// TestFindSeesFiles plants the files a torn-down volume and pod must not
// leave (the volume's directory and image, its records, a kubelet
// directory naming the pod) and requires find to report each, and
// nothing once they are gone. Mounts are read from the test's own mount
// namespace (no kubelet runs here); loop devices, the kubelet's mounts and
// quotas need a node and are checked by the VM e2e test's run before
// teardown.
func TestFindSeesFiles(t *testing.T) {
	dir := t.TempDir()
	var data localstorage.DataDirectory
	if err := data.Place(filepath.Join(dir, "data")); err != nil {
		t.Fatal(err)
	}
	if err := data.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	kubelet := filepath.Join(dir, "kubelet")
	planted := []string{
		filepath.Join(data.Volumes.FullPath(), "pvc-a"),
		filepath.Join(data.Volumes.FullPath(), "pvc-b.img"),
		filepath.Join(data.State.Records.FullPath(), "pvc-a"),
		filepath.Join(data.State.Operations.FullPath(), "pvc-b"),
		filepath.Join(kubelet, "pods", "uid-1"),
	}
	for _, p := range planted {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s := leftoversSpec{data: data.FullPath(), kubelet: kubelet, volumes: []string{"pvc-a", "pvc-b"}, keys: []string{"uid-1"}}
	left, _, err := s.find()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range planted {
		if !slices.ContainsFunc(left, func(l string) bool { return strings.HasSuffix(l, " "+p) }) {
			t.Errorf("planted %s, find reported only %q", p, left)
		}
	}
	for _, p := range planted {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	if left, _, err := s.find(); err != nil || len(left) != 0 {
		t.Errorf("after removing what was planted, find reported %q, %v", left, err)
	}
	s.mountsOf = "no-such-command"
	if _, _, err := s.find(); err == nil {
		t.Error("find with no process to read mounts from reported no error")
	}
}
