// Command nodeimage builds the Plinth node's OS image (package nodeimage)
// into the cache and prints the archive's path.
//
//	nodeimage -init plinth-node -kubelet .../kubelet -moddir .../lib/modules/<version> [-image extra.tar]...
//
// build/scripts/nodeimage.sh supplies all of that from the project's own
// caches; use it rather than this command directly. The image carries the
// node's own container images (nodeimage.NodeImages) and the -image ones:
// build/scripts/nodeimage-test.sh adds the tests' images that way.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"source.plinth.dev/build/nodeimage"
	"source.plinth.dev/node/core/imagelayout"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var (
		in      nodeimage.Inputs
		cache   string
		repo    string
		images  list
		modules list
		noDeb   bool
		gvisor  string
	)
	defCache := filepath.Join(os.Getenv("PLINTH_CACHE"), "nodeimage")
	if os.Getenv("PLINTH_CACHE") == "" {
		home, _ := os.UserHomeDir()
		defCache = filepath.Join(home, ".cache/plinth/nodeimage")
	}
	flag.StringVar(&in.Init, "init", "", "static program to run as /init (plinth-node, CGO_ENABLED=0)")
	flag.StringVar(&in.Kubelet, "kubelet", "", "the patched kubelet (third_party/kubernetes/build.sh)")
	flag.StringVar(&in.ModDir, "moddir", "", "lib/modules/<version> of the kernel the image boots with (test/ktest/kernel.sh)")
	flag.StringVar(&in.Compression, "compression", nodeimage.DefaultCompression, "archive compression: none, gzip or lz4")
	flag.StringVar(&cache, "cache", defCache, "cache directory of built images")
	flag.StringVar(&repo, "repo", ".", "the repository root, to build the pause image")
	flag.Var(&images, "image", "extra docker-archive tarball for "+imagelayout.ImageDir+" (repeatable)")
	flag.Var(&modules, "module", "extra kernel module (repeatable)")
	flag.BoolVar(&noDeb, "no-debian", false, "leave out the Debian programs (for experiments only)")
	flag.StringVar(&gvisor, "gvisor", "", "directory with gVisor's runsc and containerd-shim-runsc-v1 (third_party/gvisor/build.sh), installed as "+imagelayout.Runsc+" and its shim")
	flag.Parse()
	if in.Init == "" || in.ModDir == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	node := nodeimage.NodeInputs(in.Init, in.Kubelet, in.ModDir, nil)
	node.Compression = in.Compression
	node.Modules = append(node.Modules, modules...)
	if noDeb {
		node.Programs = nil
	}
	if gvisor != "" {
		node.Programs = append(node.Programs, nodeimage.GVisorPrograms(gvisor)...)
	}
	in = node
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, in, cache, repo, images); err != nil {
		fmt.Fprintf(os.Stderr, "nodeimage: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, in nodeimage.Inputs, cache, repo string, extra []string) error {
	start := time.Now()
	self, err := builderID()
	if err != nil {
		return fmt.Errorf("hashing the builder: %w", err)
	}
	in.Builder = self
	tmp, err := os.MkdirTemp("", "nodeimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	imgs, err := nodeimage.NodeImages(ctx, repo, tmp)
	if err != nil {
		return err
	}
	in.Images = append(imgs, extra...)
	img, err := nodeimage.Build(ctx, in, cache)
	if err != nil {
		return err
	}
	how := "built"
	if img.Cached {
		how = "cached"
	}
	fmt.Fprintf(os.Stderr, "nodeimage: %s %s in %.1fs: %.1f MiB (%.1f MiB uncompressed, %s)\n",
		how, img.Key, time.Since(start).Seconds(), float64(img.Size)/(1<<20), float64(img.RawSize)/(1<<20), in.Compression)
	fmt.Println(img.Path)
	return nil
}

// builderID hashes this executable, so that a builder built from other
// sources never reuses an image of an older one.
func builderID() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
