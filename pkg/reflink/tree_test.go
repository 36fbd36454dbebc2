package reflink_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"source.plinth.dev/pkg/reflink"
	"source.plinth.dev/test/volumetest"
)

// TestCopyTreeKeepsEverything copies a tree of every kind of entry and
// compares the copy entry by entry: modes, owners, times, contents,
// xattrs, link targets, hard links, holes; and the root's attributes.
func TestCopyTreeKeepsEverything(t *testing.T) {
	dir := volumetest.ReflinkXFS(t)
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := os.Mkdir(src, 0o2775); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	volumetest.SampleTree(t, src)
	if err := os.Chown(src, 0, 3000); err != nil {
		t.Fatal(err)
	}
	want := volumetest.DescribeTree(t, src)
	c, err := reflink.CopyTree(context.Background(), src, dst, reflink.TreeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diffs := volumetest.DiffTrees(want, volumetest.DescribeTree(t, dst)); len(diffs) > 0 {
		t.Errorf("the copy differs from the original:\n%v", diffs)
	}
	if c.Files != 5 || c.Links != 1 || c.Dirs != 3 || c.Others != 4 {
		t.Errorf("CopyTree counted %+v, want 5 files, 1 link, 3 directories, 4 others", c)
	}
	// The sparse file holds two blocks, not 16 MiB.
	if c.AllocatedBytes > 2<<20 {
		t.Errorf("the copy holds %d bytes, want the sample's few blocks (sparse kept sparse)", c.AllocatedBytes)
	}
}

func TestCopyTreeSkipsNamedXattrs(t *testing.T) {
	dir := volumetest.ReflinkXFS(t)
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	for _, d := range []string{src, dst} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, val := range map[string]string{"user.keep": "1", "trusted.mine": "2"} {
		if err := setXattr(src, name, val); err != nil {
			t.Fatal(err)
		}
	}
	_, err := reflink.CopyTree(context.Background(), src, dst, reflink.TreeOptions{SkipXattr: func(n string) bool { return n == "trusted.mine" }})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := getXattr(dst, "user.keep"); err != nil || v != "1" {
		t.Errorf("user.keep on the copy = %q, %v; want 1", v, err)
	}
	if v, err := getXattr(dst, "trusted.mine"); err == nil {
		t.Errorf("trusted.mine was copied (%q), though skipped", v)
	}
}
