// Command suiteimages writes the container images Kubernetes' storage
// suite runs (agnhost, busybox under e2e.test's names; package suite) as
// docker-archive tarballs into a directory and prints their paths, one a
// line: build/scripts/test-e2e-vm.sh passes them to the node image's
// -image, so that the VM node has them in its containerd.
//
//	suiteimages -dir DIR
//
// The e2e binaries come from $PLINTH_K8S_E2E_BIN or
// third_party/kubernetes/e2e/build.sh.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"source.plinth.dev/test/storagesuite/suite"
)

func main() {
	dir := flag.String("dir", "", "directory to write the image tarballs into (must exist)")
	flag.Parse()
	if *dir == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: suiteimages -dir DIR")
		os.Exit(2)
	}
	if err := run(context.Background(), *dir); err != nil {
		fmt.Fprintf(os.Stderr, "suiteimages: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dir string) error {
	bin, err := suite.Binaries(ctx)
	if err != nil {
		return err
	}
	paths, err := suite.Images(ctx, bin, dir)
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Println(p)
	}
	return nil
}
