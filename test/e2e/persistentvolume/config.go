package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// config is what the suite tells the workload: where each claim is, the
// size it asked for, the size it will grow them to, and what the node
// cannot do (quotas) or the runtime cannot pass (block devices).
type config struct {
	FS, FSReadOnly       string // mount points of the two filesystem claims
	Block, BlockReadOnly string // device paths of the two block claims
	Size                 int64  // every claim's request, in bytes
	ResizeTo             int64  // the size the suite grows every claim to; 0: no resize phase
	ResizeTimeout        time.Duration
	// QuotaEnforced is false where the node cannot enforce a filesystem
	// claim's size: statfs then shows the whole data filesystem, and the
	// size and fill checks of filesystem claims are skipped.
	QuotaEnforced bool
	// FSGroup is the pod's fsGroup: the workload runs as a non-root user
	// in it and must be able to write to the filesystem claim.
	FSGroup int
	// SkipBlock, when not empty, is why the block claims are not there
	// (a runtime that cannot pass block devices to the pod).
	SkipBlock string
	// SkipMountFlags, when not empty, is why the nosuid/nodev check of the
	// filesystem claim is skipped: a runtime that shows the pod mount flags
	// of its own (gVisor's sandbox kernel), not those of the node's mount.
	SkipMountFlags string
}

// parseConfig reads the flags. Nothing the suite must decide has a
// default: a missing -quota or -fsgroup is an error, so a suite cannot
// silently assume quotas are (or are not) enforced.
func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("persistentvolume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.FS, "fs", "", "mount point of the filesystem claim")
	fs.StringVar(&c.FSReadOnly, "fs-ro", "", "mount point of the filesystem claim mounted read-only")
	fs.StringVar(&c.Block, "block", "", "device path of the block claim")
	fs.StringVar(&c.BlockReadOnly, "block-ro", "", "device path of the read-only block claim")
	size := fs.String("size", "", "every claim's request (bytes, or with a Ki/Mi/Gi suffix)")
	resizeTo := fs.String("resize-to", "", "after the init checks, wait until every claim shows this size (empty: no resize phase)")
	fs.DurationVar(&c.ResizeTimeout, "resize-timeout", 3*time.Minute, "how long to wait for the resize")
	quota := fs.String("quota", "", `"enforced" or "not-enforced": whether the node enforces filesystem claim sizes (required)`)
	fs.IntVar(&c.FSGroup, "fsgroup", -1, "the pod's fsGroup (required; the workload must run as a non-root user in it)")
	skipBlock := ""
	skipSet := false
	fs.Func("skip-block", "skip the block claims, for the `reason` given (it is printed)", func(s string) error {
		skipBlock, skipSet = strings.TrimSpace(s), true
		return nil
	})
	skipFlags, skipFlagsSet := "", false
	fs.Func("skip-mount-flags", "skip the nosuid/nodev check, for the `reason` given (it is printed)", func(s string) error {
		skipFlags, skipFlagsSet = strings.TrimSpace(s), true
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	var err error
	if c.Size, err = parseSize(*size); err != nil {
		errs = append(errs, fmt.Errorf("-size: %w", err))
	}
	if *resizeTo != "" {
		if c.ResizeTo, err = parseSize(*resizeTo); err != nil {
			errs = append(errs, fmt.Errorf("-resize-to: %w", err))
		} else if c.Size > 0 && c.ResizeTo <= c.Size {
			errs = append(errs, fmt.Errorf("-resize-to %d is not above -size %d", c.ResizeTo, c.Size))
		}
	}
	switch *quota {
	case "enforced":
		c.QuotaEnforced = true
	case "not-enforced":
	default:
		errs = append(errs, fmt.Errorf(`-quota is %q, want "enforced" or "not-enforced"`, *quota))
	}
	if c.FSGroup <= 0 {
		errs = append(errs, fmt.Errorf("-fsgroup must be the pod's fsGroup, a positive group ID"))
	}
	if skipSet && skipBlock == "" {
		errs = append(errs, errors.New("-skip-block needs a reason"))
	}
	c.SkipBlock = skipBlock
	if skipFlagsSet && skipFlags == "" {
		errs = append(errs, errors.New("-skip-mount-flags needs a reason"))
	}
	c.SkipMountFlags = skipFlags
	required := map[string]string{"-fs": c.FS, "-fs-ro": c.FSReadOnly}
	if c.SkipBlock == "" {
		required["-block"], required["-block-ro"] = c.Block, c.BlockReadOnly
	}
	for _, name := range []string{"-fs", "-fs-ro", "-block", "-block-ro"} {
		if v, ok := required[name]; ok && v == "" {
			errs = append(errs, fmt.Errorf("%s is required", name))
		}
	}
	if c.ResizeTimeout <= 0 {
		errs = append(errs, errors.New("-resize-timeout must be positive"))
	}
	return c, errors.Join(errs...)
}

// parseSize reads a byte count: a plain integer or one with a binary
// suffix as Kubernetes quantities write them (Ki, Mi, Gi, Ti). Sizes must
// be whole 4 KiB blocks, the granularity of every check here.
func parseSize(s string) (int64, error) {
	num, mult := s, int64(1)
	for i, suffix := range []string{"Ki", "Mi", "Gi", "Ti"} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			num, mult = n, int64(1)<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q is not a positive number of bytes (e.g. 1048576 or 1Mi)", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	if n*mult%blockSize != 0 {
		return 0, fmt.Errorf("size %q is not a multiple of %d bytes", s, blockSize)
	}
	return n * mult, nil
}
