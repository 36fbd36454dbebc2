// Package ociimage writes single-layer container images as OCI image-layout
// archives, the format `ctr images import` and `kind load image-archive`
// accept, without docker, a registry or any image tool.
//
// The project builds its images from a handful of local files (a static Go
// program, a static busybox), so one layer is all an image needs. Archives
// are deterministic: sorted entries, zero timestamps, numeric root
// ownership and a fixed gzip level, so the same files give the same image
// digest on every machine, and a cache can key on it.
//
// The manifests, digests and configuration come from
// github.com/google/go-containerregistry; this package only lays out the
// layer's tar and the archive around the OCI layout.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
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

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
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
	// Ref names the image in the archive, e.g. plinth.local/pause:1.
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

// Layer returns the uncompressed tarball of the image's layer: the base
// directories and Files, later Files replacing earlier ones of the same
// path.
func (img Image) Layer() ([]byte, error) {
	files := make(map[string]File)
	for _, f := range append(append([]File{}, baseDirs...), img.Files...) {
		p := path.Clean(strings.TrimPrefix(f.Path, "/"))
		if p == "." || p == ".." || strings.HasPrefix(p, "../") {
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

// OCI builds the image as an OCI image (manifest, configuration, one
// gzip-compressed layer) for the architecture this program runs on.
func (img Image) OCI() (v1.Image, error) {
	layerTar, err := img.Layer()
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithCompressionLevel(gzip.DefaultCompression),
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", img.Ref, err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	oci, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{CreatedBy: "source.plinth.dev/pkg/ociimage"},
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: adding layer: %w", img.Ref, err)
	}
	cf, err := oci.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", img.Ref, err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = runtime.GOARCH, "linux"
	cf.Config.Entrypoint, cf.Config.Cmd = img.Entrypoint, img.Cmd
	cf.Config.Env = []string{"PATH=/bin:/sbin:/usr/bin:/usr/sbin"}
	oci, err = mutate.ConfigFile(oci, cf)
	if err != nil {
		return nil, fmt.Errorf("image %s: setting config: %w", img.Ref, err)
	}
	return oci, nil
}

// Annotations of the archive's index that name the image on import.
const (
	// containerdNameAnnotation is the full reference containerd's
	// importer (ctr images import, kind load) gives the image.
	containerdNameAnnotation = "io.containerd.image.name"
	// refNameAnnotation is the OCI layout's own name: the tag.
	refNameAnnotation = "org.opencontainers.image.ref.name"
)

// WriteArchive writes the image as a tarball of an OCI image layout
// (oci-layout, index.json, blobs/sha256/...), named img.Ref. It returns the
// manifest's digest.
func (img Image) WriteArchive(w io.Writer) (v1.Hash, error) {
	oci, err := img.OCI()
	if err != nil {
		return v1.Hash{}, err
	}
	return writeLayout(w, img.Ref, oci)
}

// WriteFile writes the archive to path atomically: a run cut short leaves
// no partial archive under path.
func (img Image) WriteFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".image-*")
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := img.WriteArchive(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	return nil
}

// blob is one file of the archive.
type blob struct {
	name string
	data []byte
}

// writeLayout writes oci as the only image of an OCI layout tarball.
func writeLayout(w io.Writer, ref string, oci v1.Image) (v1.Hash, error) {
	digest, manifestSize, blobs, err := imageBlobs(oci)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image %s: %w", ref, err)
	}
	index, err := layoutIndex(ref, digest, manifestSize)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image %s: %w", ref, err)
	}
	files := append([]blob{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
	}, blobs...)
	if err := writeTar(w, files); err != nil {
		return v1.Hash{}, fmt.Errorf("image %s: %w", ref, err)
	}
	return digest, nil
}

// imageBlobs reads oci's config, manifest and compressed layers into the
// blobs of its layout, and returns the manifest's digest and size too.
func imageBlobs(oci v1.Image) (digest v1.Hash, manifestSize int64, blobs []blob, err error) {
	fail := func(what string, err error) (v1.Hash, int64, []blob, error) {
		return v1.Hash{}, 0, nil, fmt.Errorf("%s: %w", what, err)
	}
	manifest, err := oci.RawManifest()
	if err != nil {
		return fail("manifest", err)
	}
	digest, err = oci.Digest()
	if err != nil {
		return fail("manifest digest", err)
	}
	config, err := oci.RawConfigFile()
	if err != nil {
		return fail("config", err)
	}
	configName, err := oci.ConfigName()
	if err != nil {
		return fail("config digest", err)
	}
	blobs = []blob{
		{"blobs/sha256/" + configName.Hex, config},
		{"blobs/sha256/" + digest.Hex, manifest},
	}
	layers, err := oci.Layers()
	if err != nil {
		return fail("layers", err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return fail("layer digest", err)
		}
		rc, err := l.Compressed()
		if err != nil {
			return fail("layer", err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return fail("reading layer", err)
		}
		blobs = append(blobs, blob{"blobs/sha256/" + d.Hex, b})
	}
	return digest, int64(len(manifest)), blobs, nil
}

// layoutIndex is the layout's index.json: the one manifest (digest, of
// manifestSize bytes), named ref for containerd and by ref's tag for
// other readers of the layout.
func layoutIndex(ref string, digest v1.Hash, manifestSize int64) ([]byte, error) {
	tag := ref
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		tag = ref[i+1:]
	}
	index := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1,
			Size:      manifestSize,
			Digest:    digest,
			Annotations: map[string]string{
				containerdNameAnnotation: ref,
				refNameAnnotation:        tag,
			},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	return indexJSON, nil
}

// writeTar writes files to w as a tar archive below the directories
// blobs/ and blobs/sha256/, with fixed modes and times so that the same
// image always makes the same bytes.
func writeTar(w io.Writer, files []blob) error {
	tw := tar.NewWriter(w)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			return fmt.Errorf("writing archive: %w", err)
		}
	}
	for _, f := range files {
		h := &tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("writing archive: %w", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("writing archive: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("closing archive: %w", err)
	}
	return nil
}
