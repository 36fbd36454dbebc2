// Command containerimage writes the container image of plinth-node that
// deploy/ runs (an OCI archive for `ctr images import` or `kind load
// image-archive`) into a cache directory, and prints the archive's path.
//
// The image holds the static plinth-node binary and nothing else: the
// hosted mode the DaemonSet runs execs no other program (it mounts, binds
// loop devices and sets quotas through system calls; only a booted node
// formats its disk with mkfs.xfs). Without a shell there is nothing to exec
// into, which is one less thing a privileged pod carries.
//
// The archive's name is its content key: a hash of the layer's bytes, the
// reference and the builder's version.
// A second run with the same binary finds the archive and writes nothing.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"source.plinth.dev/pkg/ociimage"
)

// Ref is the image's reference; deploy/ names it, with imagePullPolicy
// IfNotPresent since nothing serves plinth.local.
const Ref = "plinth.local/plinth-node:dev"

// keyVersion changes when the builder lays out the same files differently
// (compression, configuration), so that old archives are not reused.
const keyVersion = "plinth-containerimage-1"

func main() {
	binary := flag.String("binary", "", "static plinth-node binary (CGO_ENABLED=0)")
	dir := flag.String("dir", "", "cache directory of the archives")
	flag.Parse()
	if *binary == "" || *dir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: containerimage -binary PLINTH-NODE -dir CACHE-DIR")
		os.Exit(2)
	}
	p, err := build(*binary, *dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "containerimage: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(p)
}

// build writes the archive into dir unless it is already there, and
// returns its path.
func build(binary, dir string) (string, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return "", fmt.Errorf("reading plinth-node: %w", err)
	}
	img := ociimage.Image{
		Ref:        Ref,
		Entrypoint: []string{"/plinth-node"},
		Files:      []ociimage.File{{Path: "plinth-node", Mode: 0o755, Data: data}},
	}
	// The key is computed before the costly compression, from everything
	// the image is made of: the layer's bytes, the reference, the builder.
	layer, err := img.Layer()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", keyVersion, Ref)
	h.Write(layer)
	p := filepath.Join(dir, "plinth-node-"+hex.EncodeToString(h.Sum(nil))[:24]+".tar")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating cache directory: %w", err)
	}
	if err := img.WriteFile(p); err != nil {
		return "", err
	}
	return p, nil
}
