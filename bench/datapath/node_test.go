package main

import (
	"slices"
	"strings"
	"testing"

	"source.plinth.dev/bench/fio"
)

// TestPickImageWantsOneFullSizedFileOfTheVolume: the image is the one
// file named by the volume's handle that is as large as the claim; none
// or two such files are an error, not a guess.
func TestPickImageWantsOneFullSizedFileOfTheVolume(t *testing.T) {
	img := nodeFile{"/data/volumes/pvc-1.img", fileSize}
	other := nodeFile{"/data/volumes/pvc-2.img", fileSize}
	small := nodeFile{"/data/state/pvc-1.json", 300}
	got, err := pickImage([]nodeFile{other, small, img}, "pvc-1", fileSize)
	if err != nil || got != img.path {
		t.Errorf("pickImage = %q, %v; want %s", got, err, img.path)
	}
	for _, files := range [][]nodeFile{nil, {small}, {img, {"/data/quarantine/pvc-1.img", fileSize}}} {
		if got, err := pickImage(files, "pvc-1", fileSize); err == nil {
			t.Errorf("pickImage(%v) = %q, want an error", files, got)
		}
	}
}

// TestPickVolumeFileWantsFioFileInTheVolume: the filesystem volume's
// file is fio's, in a directory named by the volume's handle, as large as
// fio made it; another volume's, a short one or two are not it.
func TestPickVolumeFileWantsFioFileInTheVolume(t *testing.T) {
	file := nodeFile{"/data/volumes/pvc-1/" + fileName, fileSize}
	other := nodeFile{"/data/volumes/pvc-2/" + fileName, fileSize}
	record := nodeFile{"/data/state/pvc-1.json", 300}
	short := nodeFile{"/data/volumes/pvc-1/" + fileName, 4096}
	got, err := pickVolumeFile([]nodeFile{other, record, file}, "pvc-1", fileSize)
	if err != nil || got != file.path {
		t.Errorf("pickVolumeFile = %q, %v; want %s", got, err, file.path)
	}
	for _, files := range [][]nodeFile{nil, {other, record}, {short}, {file, {"/data/quarantine/pvc-1/" + fileName, fileSize}}} {
		if got, err := pickVolumeFile(files, "pvc-1", fileSize); err == nil {
			t.Errorf("pickVolumeFile(%v) = %q, want an error", files, got)
		}
	}
}

// TestParseSizesReadsStatLines: the VM node's find prints stat's "SIZE
// PATH" lines; anything else is an error.
func TestParseSizesReadsStatLines(t *testing.T) {
	got, err := parseSizes([]byte("1073741824 /data/volumes/pvc-1.img\n12 /data/a b\n"))
	want := []nodeFile{{"/data/volumes/pvc-1.img", 1 << 30}, {"/data/a b", 12}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("parseSizes = %v, %v; want %v", got, err, want)
	}
	if got, err := parseSizes(nil); err != nil || len(got) != 0 {
		t.Errorf("parseSizes(nothing) = %v, %v; want no files", got, err)
	}
	if _, err := parseSizes([]byte("find: /data/x: No such file\n")); err == nil {
		t.Error("parseSizes took find's error for a file")
	}
}

// TestVMResultsHaveTheirOwnNamesAndNoNodeFloors: the VM node's results
// stand beside the host's in one report, so their names differ; its
// series are the targets it ran (no node floors), each volume beside its
// in-pod floor.
func TestVMResultsHaveTheirOwnNamesAndNoNodeFloors(t *testing.T) {
	n := vmNode{}
	if slices.Contains(n.targets(), nodeDir) || slices.Contains(n.targets(), nodeImage) {
		t.Fatalf("VM targets %v include a node floor", n.targets())
	}
	all := runs{}
	for _, tg := range n.targets() {
		all[tg] = map[string][]fio.Measure{}
		for _, w := range workloads {
			all[tg][w.Name] = []fio.Measure{{IOPS: 1, Bandwidth: 1, P50: 1, P99: 1}}
		}
	}
	host := map[string]bool{}
	for _, r := range buildResults(all, "", "", nil) {
		host[r.Name] = true
	}
	for _, r := range buildResults(all, n.name(), "", nil) {
		if host[r.Name] || !strings.HasPrefix(r.Name, "datapath-vm-") {
			t.Errorf("VM result %s: want a name of its own, datapath-vm-*", r.Name)
		}
		if r.Series[0].Name != r.Baseline {
			t.Errorf("%s: first series %s, want the baseline %s", r.Name, r.Series[0].Name, r.Baseline)
		}
		for _, s := range r.Series {
			if !slices.Contains(n.targets(), s.Name) || len(s.Points) != len(workloads) {
				t.Errorf("%s: series %s with %d points: want a target the VM ran, one point per workload", r.Name, s.Name, len(s.Points))
			}
		}
	}
}
