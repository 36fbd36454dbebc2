// Command plinth-node is the node agent of Plinth: the init of a Plinth node
// and, hosted on any Linux machine, the same supervision tree under a
// directory of its own.
//
// Modes, chosen at start:
//   - PID 1 without --root: minimal OS init (see init.go), then this binary
//     again as its only child, with --root / and the kernel command line's
//     settings. PID 1 with --root (or a subcommand) is a container's first
//     process (deploy/'s DaemonSet), hosted like any other below.
//   - "csi-serve" as first argument: the standalone CSI plugin (csiserve.go).
//   - "admission-serve": the admission webhook the control plane calls
//     (admissionserve.go).
//   - anything else: the node tree (node.go), until SIGINT or SIGTERM.
//
// Executed under the name runcguard.Name (a link containerd's
// configuration names as runc), it is runc's wrapper instead
// (package runcguard).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"source.plinth.dev/node/kubernetes/runcguard"
)

func main() {
	if filepath.Base(os.Args[0]) == runcguard.Name {
		os.Exit(runcguard.Main(os.Args))
	}
	if os.Getpid() == 1 && !hosted(os.Args[1:]) {
		runInit() // never returns
	}
	os.Exit(run(os.Args[1:]))
}

// hosted reports whether args, given to PID 1, ask for a hosted mode: the
// kernel never passes init a --root (init adds --root / for its child
// itself), while a container runs plinth-node as PID 1 of its PID
// namespace with the flags of its manifest, which always name the root.
// Running init there would mount /proc and /sys over the container's,
// load kernel modules, and reboot on failure.
func hosted(args []string) bool {
	if len(args) > 0 && subcommand(args[0]) != nil {
		return true
	}
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "root" {
			return true
		}
		if a == "--" {
			break
		}
	}
	return false
}

// subcommand is the mode named by a first argument name, or nil.
func subcommand(name string) func(context.Context, []string) error {
	switch name {
	case "csi-serve":
		return csiServe
	case "admission-serve":
		return admissionServe
	}
	return nil
}

// run is main for every mode but PID 1; it returns the exit code.
func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGINT, unix.SIGTERM)
	defer stop()
	go func() {
		// The first signal starts a clean shutdown; restoring the default
		// handling lets a second one end a shutdown that hangs.
		<-ctx.Done()
		stop()
	}()

	if len(args) > 0 {
		if serve := subcommand(args[0]); serve != nil {
			if err := serve(ctx, args[1:]); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					return 0
				}
				fmt.Fprintf(os.Stderr, "plinth-node %s: %v\n", args[0], err)
				return 1
			}
			return 0
		}
	}

	o, err := parseOptions(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "plinth-node: %v\n", err)
		return 2
	}
	if err := runNode(ctx, o, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "plinth-node: %v\n", err)
		return 1
	}
	return 0
}
