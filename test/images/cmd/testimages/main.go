// Command testimages writes the images the tests run on a node booted
// from the node image (busybox and the e2e workload:
// images.WriteNodeTestImages) as archives into a directory and prints
// their paths, one a line: build/scripts/nodeimage-test.sh passes them to
// the node image's -image to make its test variant.
//
//	testimages -dir DIR
//
// It runs from the repository's root (the workload is built from its
// source there).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"source.plinth.dev/test/images"
)

func main() {
	dir := flag.String("dir", "", "directory to write the image archives into (must exist)")
	flag.Parse()
	if *dir == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: testimages -dir DIR")
		os.Exit(2)
	}
	paths, err := images.WriteNodeTestImages(context.Background(), ".", *dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testimages: %v\n", err)
		os.Exit(1)
	}
	for _, p := range paths {
		fmt.Println(p)
	}
}
