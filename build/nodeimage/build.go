package nodeimage

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

// Compressions the kernel unpacks (the Debian kernel has RD_GZIP and
// RD_LZ4); "lz4" is the legacy frame format the kernel reads, written by
// the lz4 tool.
var Compressions = map[string]string{"none": "initramfs.cpio", "gzip": "initramfs.cpio.gz", "lz4": "initramfs.cpio.lz4"}

// Image is a built node image.
type Image struct {
	// Dir is the cache directory of this key; Path the archive in it.
	Dir, Path string
	Key       string
	// Cached is true when the image was already built.
	Cached bool
	// Size and RawSize are the archive's size and its size uncompressed.
	Size, RawSize int64
}

// Manifest names the file in the image directory that lists every member
// of the archive with its size and host source.
const Manifest = "manifest"

// keep is how many images Build leaves in the cache: each is a few
// hundred megabytes, and every change to plinth-node makes a new one.
const keep = 4

// Build returns the image for in from cacheDir/<key>, building it if it is
// not there. Concurrent builds of one key are safe: each writes a
// temporary directory and the first to rename it into place wins.
func Build(ctx context.Context, in Inputs, cacheDir string) (Image, error) {
	name, ok := Compressions[in.Compression]
	if !ok {
		return Image{}, fmt.Errorf("unknown compression %q (want none, gzip or lz4)", in.Compression)
	}
	es, err := plan(in)
	if err != nil {
		return Image{}, err
	}
	k, err := key(in, es)
	if err != nil {
		return Image{}, fmt.Errorf("hashing the inputs: %w", err)
	}
	img := Image{Dir: filepath.Join(cacheDir, k), Key: k}
	img.Path = filepath.Join(img.Dir, name)
	if _, err := os.Stat(filepath.Join(img.Dir, ".complete")); err == nil {
		img.Cached = true
		// A use counts as new for prune.
		now := time.Now()
		if err := os.Chtimes(filepath.Join(img.Dir, ".complete"), now, now); err != nil {
			return Image{}, err
		}
		return img, img.sizes()
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return Image{}, err
	}
	tmp, err := os.MkdirTemp(cacheDir, ".build-")
	if err != nil {
		return Image{}, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Image{}, err
	}
	if err := write(ctx, tmp, name, in.Compression, es); err != nil {
		return Image{}, err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return Image{}, err
	}
	if err := os.Rename(tmp, img.Dir); err != nil {
		// Another build of the same key finished first; its image has
		// the same bytes.
		if _, serr := os.Stat(filepath.Join(img.Dir, ".complete")); serr != nil {
			return Image{}, fmt.Errorf("storing the image: %w", err)
		}
		img.Cached = true
	}
	if err := prune(cacheDir, keep); err != nil {
		return Image{}, err
	}
	return img, img.sizes()
}

func (img *Image) sizes() error {
	fi, err := os.Stat(img.Path)
	if err != nil {
		return err
	}
	img.Size = fi.Size()
	b, err := os.ReadFile(filepath.Join(img.Dir, "rawsize"))
	if err != nil {
		return err
	}
	_, err = fmt.Sscan(string(b), &img.RawSize)
	return err
}

// write writes the archive, compressed, and the manifest into dir.
func write(ctx context.Context, dir, name, compression string, es []entry) error {
	raw := filepath.Join(dir, "initramfs.cpio")
	f, err := os.Create(raw)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := os.Create(filepath.Join(dir, Manifest))
	if err != nil {
		return err
	}
	defer m.Close()
	mw := bufio.NewWriter(m)
	if err := writeArchive(f, mw, es); err != nil {
		return fmt.Errorf("writing the archive: %w", err)
	}
	if err := mw.Flush(); err != nil {
		return err
	}
	if err := m.Close(); err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "rawsize"), fmt.Appendf(nil, "%d\n", fi.Size()), 0o644); err != nil {
		return err
	}
	switch compression {
	case "none":
		return nil
	case "gzip":
		err = gzipFile(raw, filepath.Join(dir, name))
	case "lz4":
		// -l: the legacy frame, the only one the kernel's unpacker reads.
		cmd := exec.CommandContext(ctx, "lz4", "-q", "-l", "-9", "-f", raw, filepath.Join(dir, name))
		if out, cerr := cmd.CombinedOutput(); cerr != nil {
			err = fmt.Errorf("lz4: %w\n%s", cerr, out)
		}
	}
	if err != nil {
		return fmt.Errorf("compressing the archive: %w", err)
	}
	return os.Remove(raw)
}

func gzipFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	// The zero header (no name, no time) keeps the output deterministic.
	zw, err := gzip.NewWriterLevel(out, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	if _, err := io.Copy(zw, bufio.NewReaderSize(in, 1<<20)); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return out.Close()
}

// prune removes all but the n most recently built images.
func prune(cacheDir string, n int) error {
	ents, err := os.ReadDir(cacheDir)
	if err != nil {
		return err
	}
	type built struct {
		dir string
		t   time.Time
	}
	var all []built
	for _, e := range ents {
		fi, err := os.Stat(filepath.Join(cacheDir, e.Name(), ".complete"))
		if errors.Is(err, os.ErrNotExist) {
			continue // a build in progress, or not ours
		} else if err != nil {
			return err
		}
		all = append(all, built{filepath.Join(cacheDir, e.Name()), fi.ModTime()})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].t.After(all[j].t) })
	for i := n; i < len(all); i++ {
		if err := os.RemoveAll(all[i].dir); err != nil {
			return fmt.Errorf("pruning old images: %w", err)
		}
	}
	return nil
}
