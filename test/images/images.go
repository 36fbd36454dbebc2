// Package images builds the container images a Plinth test node needs, as
// image tarballs that `ctr images import` loads into containerd.
//
// No registry is reachable from CI, so nothing is pulled: every image is a
// single layer written here from local files (a static Go program, the
// Debian busybox-static binary) without docker or any image tool. The
// archives are deterministic (sorted entries, zero timestamps, numeric
// root ownership), so the same inputs give the same image ID.
package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Image references. Pods must use imagePullPolicy: Never (or IfNotPresent),
// since kubelet cannot pull from the made-up registry host.
const (
	// PauseRef is the sandbox image configured in containerd.
	PauseRef = "plinth.local/pause:1"
	// BusyboxRef is a general-purpose test image with a shell and the
	// busybox applets (dd, stat, sleep, ...).
	BusyboxRef = "plinth.local/busybox:1"
	// PersistentVolumeRef is the e2e test workload (test/e2e/persistentvolume),
	// which checks its claims from inside the pod.
	PersistentVolumeRef = "plinth.local/persistentvolume:1"
)

// File is one entry of an image's only layer.
type File struct {
	// Path is relative to the image root, without a leading slash.
	Path string
	// Mode holds permission bits; the type comes from the other fields.
	Mode os.FileMode
	// Dir marks a directory.
	Dir bool
	// Link, when set, makes the entry a symbolic link to Link.
	Link string
	// Data is the content of a regular file.
	Data []byte
}

// Image is a single-layer image.
type Image struct {
	Ref        string
	Entrypoint []string
	Cmd        []string
	Files      []File
}

// baseDirs are created in every image so runtimes find their mount points.
var baseDirs = []File{
	{Path: "bin", Mode: 0o755, Dir: true},
	{Path: "dev", Mode: 0o755, Dir: true},
	{Path: "etc", Mode: 0o755, Dir: true},
	{Path: "proc", Mode: 0o555, Dir: true},
	{Path: "sys", Mode: 0o555, Dir: true},
	{Path: "tmp", Mode: 0o1777, Dir: true},
	{Path: "var", Mode: 0o755, Dir: true},
}

// layer returns the layer tarball.
func (img Image) layer() ([]byte, error) {
	files := make(map[string]File)
	for _, f := range append(append([]File{}, baseDirs...), img.Files...) {
		p := path.Clean(strings.TrimPrefix(f.Path, "/"))
		if p == "." || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("image %s: invalid path %q", img.Ref, f.Path)
		}
		f.Path = p
		files[p] = f
	}
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		f := files[p]
		// Mode bits are the raw Unix ones (0o1777 for tmp), as tar wants them.
		h := &tar.Header{Name: p, Mode: int64(f.Mode & 0o7777), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, p+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("image %s: writing %s: %w", img.Ref, p, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, fmt.Errorf("image %s: writing %s: %w", img.Ref, p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image %s: closing layer: %w", img.Ref, err)
	}
	return buf.Bytes(), nil
}

// WriteArchive writes the image as a docker-archive tarball (manifest.json,
// image config, one layer.tar), the format `ctr images import` accepts
// without further options.
func (img Image) WriteArchive(w io.Writer) error {
	layer, err := img.layer()
	if err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer)
	layerID := hex.EncodeToString(layerSum[:])

	config := map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": img.Entrypoint,
			"Cmd":        img.Cmd,
			"Env":        []string{"PATH=/bin:/sbin:/usr/bin:/usr/sbin"},
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerID}},
		"history": []map[string]string{{"created_by": "source.plinth.dev/test/images"}},
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return fmt.Errorf("image %s: encoding config: %w", img.Ref, err)
	}
	configSum := sha256.Sum256(configJSON)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": []string{img.Ref},
		"Layers":   []string{layerID + "/layer.tar"},
	}})
	if err != nil {
		return fmt.Errorf("image %s: encoding manifest: %w", img.Ref, err)
	}

	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{"manifest.json", manifest},
		{configName, configJSON},
		{layerID + "/layer.tar", layer},
	}
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("image %s: writing archive: %w", img.Ref, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return fmt.Errorf("image %s: writing archive: %w", img.Ref, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("image %s: writing archive: %w", img.Ref, err)
	}
	return nil
}

// WriteFile writes the archive to path atomically.
func (img Image) WriteFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".image-*")
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	defer os.Remove(tmp.Name())
	if err := img.WriteArchive(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	return nil
}
