package main

import (
	"slices"
	"testing"

	"source.plinth.dev/node/core"
	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/nodeconfig"
)

// TestBootedNodeSharesItsWritersDirectories: a booted node owns the
// kubelet's and containerd's layout on the data partition, and gives the
// volume engine those directories as the node share, the same paths the
// kubelet and containerd are started with.
func TestBootedNodeSharesItsWritersDirectories(t *testing.T) {
	var tree localstorage.Root
	if err := tree.Place("/"); err != nil {
		t.Fatal(err)
	}
	if err := tree.Kubelet.Place(bootKubeletDirOnData); err != nil {
		t.Fatal(err)
	}
	b := &bootedNode{cfg: &nodeconfig.Config{}, tree: &tree}
	var c core.Config
	b.apply(&c)
	want := []string{"/data/kubelet", "/data/containerd", "/data/pod-logs"}
	if !slices.Equal(c.NodeShare.Dirs, want) {
		t.Errorf("node share %v, want %v", c.NodeShare.Dirs, want)
	}
	if b.containerdRoot() != want[1] || b.podLogsDir() != want[2] {
		t.Errorf("containerd's root %s and the pods' logs %s are not the share's", b.containerdRoot(), b.podLogsDir())
	}
}
