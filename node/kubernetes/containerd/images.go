package containerd

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/process"
	"source.plinth.dev/pkg/supervisor"
)

// A booted node's images come only from its image archives: nothing pulls
// them again. containerd 1.6 cannot pin an image, and the kubelet's
// eviction manager deletes unused images under disk pressure whatever
// imageGCHighThresholdPercent says, the sandbox image included; after that
// no pod starts until the node reboots. So the node keeps its archives'
// images present itself (KeepImages).

// ImportImages imports every *.tar (docker-archive or OCI layout tarball)
// in dir into the CRI namespace, so the kubelet finds them without a
// registry. Importing an image that is already there is cheap and
// harmless, so this runs on every start. A missing dir imports nothing.
func (c Config) ImportImages(ctx context.Context, log logtree.LeveledLogger, dir string) ([]string, error) {
	tars, err := archives(dir)
	if err != nil {
		return nil, err
	}
	for _, t := range tars {
		if err := c.importArchive(ctx, log, t); err != nil {
			return nil, err
		}
	}
	return tars, nil
}

// archives lists the image tarballs in dir.
func archives(dir string) ([]string, error) {
	tars, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, fmt.Errorf("listing images in %s: %w", dir, err)
	}
	return tars, nil
}

func (c Config) importArchive(ctx context.Context, log logtree.LeveledLogger, tarball string) error {
	err := process.Run(ctx, log, process.Spec{
		Path: c.ctr(),
		Args: []string{"--address", c.Socket, "--namespace", Namespace, "images", "import", tarball},
	})
	if err != nil {
		return fmt.Errorf("importing image %s: %w", tarball, err)
	}
	return c.syncRoot()
}

// syncRoot flushes the filesystem of containerd's root to disk. containerd
// writes an image's layers to its content store with fsync, but unpacks
// them into snapshots without, and records each snapshot as done: after a
// power cut within the kernel's writeback delay (about 30 s) the snapshot
// counts as unpacked while its files are empty, an import finds the image
// present and unpacks nothing, and no pod sandbox starts again (the VM
// node's pause binary was 0 bytes after a cut 7 s after its first boot's
// import; docs/benchmarks.md, "Reboot to first byte"). One syncfs after
// each import leaves only the import itself exposed.
func (c Config) syncRoot() error {
	if c.Root == "" {
		return nil
	}
	f, err := os.Open(c.Root)
	if err != nil {
		return fmt.Errorf("syncing containerd's root: %w", err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncing the filesystem of containerd's root %s: %w", c.Root, err)
	}
	return nil
}

// Images lists the names of the images in the CRI namespace, as the
// kubelet sees them.
func (c Config) Images(ctx context.Context) (map[string]bool, error) {
	cmd := exec.CommandContext(ctx, c.ctr(), "--address", c.Socket, "--namespace", Namespace, "images", "ls", "-q")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing images: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	names := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			names[l] = true
		}
	}
	return names, nil
}

// ArchiveImages returns the names containerd gives the images of an image
// tarball when it imports it: an OCI layout's index.json names an image
// by its io.containerd.image.name annotation, or by its
// org.opencontainers.image.ref.name if that is a full reference; a
// docker-archive's manifest.json by its RepoTags, normalised as containerd
// does (busybox:1 is docker.io/library/busybox:1).
func ArchiveImages(tarball string) ([]string, error) {
	f, err := os.Open(tarball)
	if err != nil {
		return nil, fmt.Errorf("reading image names of %s: %w", tarball, err)
	}
	defer f.Close()
	names, err := archiveImages(f)
	if err != nil {
		return nil, fmt.Errorf("reading image names of %s: %w", tarball, err)
	}
	return names, nil
}

func archiveImages(r io.Reader) ([]string, error) {
	seen := map[string]bool{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		var names []string
		switch strings.TrimPrefix(h.Name, "./") {
		case "index.json":
			names, err = indexNames(tr)
		case "manifest.json":
			names, err = manifestNames(tr)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h.Name, err)
		}
		for _, n := range names {
			seen[n] = true
		}
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// indexNames reads an OCI layout's index.json.
func indexNames(r io.Reader) ([]string, error) {
	var index struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&index); err != nil {
		return nil, err
	}
	var names []string
	for _, m := range index.Manifests {
		if n := m.Annotations["io.containerd.image.name"]; n != "" {
			names = append(names, n)
		} else if n := m.Annotations["org.opencontainers.image.ref.name"]; strings.Contains(n, "/") {
			names = append(names, n)
		}
	}
	return names, nil
}

// manifestNames reads a docker-archive's manifest.json.
func manifestNames(r io.Reader) ([]string, error) {
	var manifest []struct {
		RepoTags []string `json:"RepoTags"`
	}
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&manifest); err != nil {
		return nil, err
	}
	var names []string
	for _, m := range manifest {
		for _, t := range m.RepoTags {
			names = append(names, normalizeRef(t))
		}
	}
	return names, nil
}

// normalizeRef is a docker-style reference as containerd names it: with a
// registry (docker.io when the first component names none), library/ for
// docker.io's one-component names, and :latest when it has no tag.
func normalizeRef(ref string) string {
	first, _, hasSlash := strings.Cut(ref, "/")
	if !hasSlash || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		if !hasSlash {
			ref = "library/" + ref
		}
		ref = "docker.io/" + ref
	}
	last := ref[strings.LastIndex(ref, "/")+1:]
	if !strings.ContainsAny(last, ":@") {
		ref += ":latest"
	}
	return ref
}

// KeepImages keeps the images of the tarballs in dir present: every
// interval it lists containerd's images, and imports again the archive of
// any image that is gone. It runs after ImportImages: an image the archive
// names but containerd does not list after that is not watched (it would
// be imported in vain every time), which is logged.
func (c Config) KeepImages(dir string, interval time.Duration) supervisor.Runnable {
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		watched, err := c.watchedImages(ctx, log, dir)
		if err != nil {
			return err
		}
		log.Infof("keeping %d images of %s present, checking every %s", len(watched), dir, interval)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
			if err := c.restoreImages(ctx, log, watched); err != nil {
				log.Warningf("%v", err)
			}
		}
	}
}

// watchedImages maps each image that dir's archives hold, and containerd
// lists, to its archive.
func (c Config) watchedImages(ctx context.Context, log logtree.LeveledLogger, dir string) (map[string]string, error) {
	tars, err := archives(dir)
	if err != nil {
		return nil, err
	}
	present, err := c.Images(ctx)
	if err != nil {
		return nil, err
	}
	watched := map[string]string{}
	for _, t := range tars {
		names, err := ArchiveImages(t)
		if err != nil {
			log.Warningf("not keeping the images of %s: %v", t, err)
			continue
		}
		if len(names) == 0 {
			log.Warningf("not keeping the images of %s: it names none", t)
		}
		for _, n := range names {
			if !present[n] {
				log.Warningf("not keeping image %s of %s: containerd does not list it after the import", n, t)
				continue
			}
			watched[n] = t
		}
	}
	return watched, nil
}

// restoreImages imports again the archive of each watched image
// containerd no longer lists.
func (c Config) restoreImages(ctx context.Context, log logtree.LeveledLogger, watched map[string]string) error {
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	present, err := c.Images(lctx)
	cancel()
	if err != nil {
		return err
	}
	done := map[string]bool{}
	for n, t := range watched {
		if present[n] || done[t] {
			continue
		}
		start := time.Now()
		if err := c.importArchive(ctx, log, t); err != nil {
			return fmt.Errorf("image %s is gone: %w", n, err)
		}
		done[t] = true
		log.Infof("image %s was gone (deleted, as the kubelet's image reclaim does); imported it again from %s in %s", n, t, time.Since(start).Round(time.Millisecond))
	}
	return nil
}
