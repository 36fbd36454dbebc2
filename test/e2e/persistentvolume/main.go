// Command persistentvolume is the test workload of Plinth's end-to-end
// tests: it runs in a pod with four claims (filesystem; filesystem mounted
// read-only through the claim's readOnly flag; block; block read-only) and
// checks from inside what the pod really gets: sizes (statfs,
// BLKGETSIZE64), mount flags, writes that read back (O_DIRECT on block),
// read-only claims that refuse writes, an fsGroup that lets a non-root
// user write, and, where the node enforces quotas, a write past the size
// that fails at exactly the limit.
//
// It prints one line per check ([PASS], [FAIL] or [SKIP] with the reason),
// then [INIT-PASSED] or [INIT-FAILED] <reason>. Given -resize-to, it then
// polls until every claim shows that size from inside and prints
// [RESIZE-PASSED] or [RESIZE-FAILED] <reason>. Then it stays alive until
// SIGTERM, so the suite can read the log and tear the pod down.
//
// With "-damage-quota MODE:DIR" instead, it damages a volume's project
// quota (damage.go) for the health tests, prints [DAMAGE-DONE] or
// [DAMAGE-FAILED] <reason>, and waits for SIGTERM.
//
// With "-escape-quota DIR" it moves part of the volume mounted at DIR out
// of the volume's project quota, as a pod in the host's user namespace
// can, writes past the volume's size (escape.go), prints [ESCAPED] or
// [ESCAPE-FAILED] <reason>, then [ESCAPE-ENDED] once a write fails over
// the size again, and waits for SIGTERM.
//
// With "-project-writes DIR" it prints the volume's project ID and then
// writes half the volume's size every second, saying whether each write
// succeeded; with "-move-into ID:DIR" it moves a directory of its volume
// into project ID and fills it (neighbour.go): a pod attacking its
// neighbour's quota, and the neighbour. "-show-project DIR" only prints
// the project ID; "-move-quietly ID:DIR" writes a file in DIR and moves it
// into project ID afterwards, writing nothing after the move.
//
// With "-append-records PATH" it writes numbered records to PATH, each
// acknowledged before the next, and prints how many are; with
// "-check-records PATH" it says whether PATH holds a gap-free prefix of
// them (records.go): what a snapshot taken during the writes must hold.
//
// With "-node-leftovers DATA,KUBELET,WAIT,VOLUME[+VOLUME...][,KEY...]" it looks
// for what deleting those volumes' claims and their pod should have
// removed from the node (leftovers.go), and prints [NODE-CLEAN] or
// [NODE-LEFT] with what it found, then waits for SIGTERM.
//
// It is static (CGO_ENABLED=0), uses the standard library, golang.org/x/sys
// and the project's node-side packages (no Kubernetes client), and needs
// nothing from the host: test/images packs it
// into plinth.local/persistentvolume:1, and the same image runs on the
// host cluster and in the node VM.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The damage mode: the health tests break a volume from a privileged
	// pod on the node, and read the result in its log.
	if len(os.Args) == 3 && os.Args[1] == "-damage-quota" {
		fmt.Println(damageQuota(os.Args[2]))
		<-ctx.Done()
		return
	}
	// The escape mode: the audit test plays a pod that writes past its
	// volume's size, and reads in its log when that stops working.
	if len(os.Args) == 3 && os.Args[1] == "-escape-quota" {
		escapeQuota(ctx, os.Args[2], os.Stdout, 2*time.Second)
		<-ctx.Done()
		return
	}
	// The neighbour modes: the victim and the attacker of a move into
	// another volume's project.
	if len(os.Args) == 3 && os.Args[1] == "-project-writes" {
		projectWrites(ctx, os.Args[2], os.Stdout, time.Second)
		<-ctx.Done()
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "-move-into" {
		moveInto(os.Args[2], os.Stdout)
		<-ctx.Done()
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "-show-project" {
		showProject(os.Args[2], os.Stdout)
		<-ctx.Done()
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "-move-quietly" {
		moveQuietly(os.Args[2], os.Stdout)
		<-ctx.Done()
		return
	}
	// The records modes: the snapshot tests write numbered records while
	// a snapshot is taken, and check what a restore of it holds.
	if recordsMain(ctx, os.Args[1:], os.Stdout) {
		return
	}
	// The leftovers mode: the e2e tests look, from a privileged pod on the
	// node, for what deleting their claims and pod should have removed.
	if len(os.Args) == 3 && os.Args[1] == "-node-leftovers" {
		spec, err := parseLeftovers(os.Args[2])
		if err != nil {
			fmt.Printf("%s bad arguments: %v\n", markNodeLeft, err)
		} else {
			fmt.Println(nodeLeftovers(ctx, spec, time.Second))
		}
		<-ctx.Done()
		return
	}
	c, err := parseConfig(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Printf("%s bad arguments: %v\n", markInitFailed, err)
		<-ctx.Done()
		os.Exit(2)
	}
	run(ctx, c, os.Stdout, 500*time.Millisecond)
	<-ctx.Done()
}

// run does both phases and prints their results to out.
func run(ctx context.Context, c config, out io.Writer, poll time.Duration) {
	fmt.Fprintf(out, "persistentvolume: uid %d gid %d, claims of %d bytes, quotas enforced: %v\n", os.Getuid(), os.Getgid(), c.Size, c.QuotaEnforced)
	var init []result
	init = append(init, filesystemChecks(c)...)
	init = append(init, readOnlyFilesystemChecks(c)...)
	init = append(init, blockChecks(c)...)
	for _, r := range init {
		fmt.Fprintln(out, r)
	}
	v := verdict(markInitPassed, markInitFailed, init)
	fmt.Fprintln(out, v)
	if c.ResizeTo == 0 {
		return
	}
	if v != markInitPassed {
		fmt.Fprintf(out, "%s the init checks failed\n", markResizeFailed)
		return
	}
	fmt.Fprintf(out, "persistentvolume: waiting up to %v for every claim to show %d bytes\n", c.ResizeTimeout, c.ResizeTo)
	rs := resize(ctx, c, poll)
	for _, r := range rs {
		fmt.Fprintln(out, r)
	}
	fmt.Fprintln(out, verdict(markResizePassed, markResizeFailed, rs))
}
