package main

import (
	"context"
	"fmt"
	"time"
)

// watched is one size the resize phase waits for.
type watched struct {
	name string
	size func() (int64, error)
}

// watchList is what the pod can see grow: block devices always, a
// filesystem claim only where its quota is what statfs reports.
func watchList(c config) (list []watched, skipped []result) {
	if c.QuotaEnforced {
		list = append(list,
			watched{"fs: statfs size after resize", func() (int64, error) { return fsSize(c.FS) }},
			watched{"fs-ro: statfs size after resize", func() (int64, error) { return fsSize(c.FSReadOnly) }})
	} else {
		skipped = append(skipped, result{Name: "fs, fs-ro: statfs size after resize", Skip: "quotas are not enforced on this node, statfs shows the data filesystem"})
	}
	if c.SkipBlock == "" {
		list = append(list,
			watched{"block: BLKGETSIZE64 after resize", func() (int64, error) { return deviceSize(c.Block) }},
			watched{"block-ro: BLKGETSIZE64 after resize", func() (int64, error) { return deviceSize(c.BlockReadOnly) }})
	} else {
		skipped = append(skipped, result{Name: "block, block-ro: all resize checks", Skip: c.SkipBlock})
	}
	return list, skipped
}

// resize polls until every watched size is c.ResizeTo (or the timeout
// passes, or ctx ends), then checks that the grown claims are usable:
// the new end of the block device takes writes and the data written
// before the resize is still there, and where quotas are enforced the
// filesystem claim is full at exactly its new size.
func resize(ctx context.Context, c config, poll time.Duration) []result {
	list, rs := watchList(c)
	ctx, cancel := context.WithTimeout(ctx, c.ResizeTimeout)
	defer cancel()
	start := time.Now()
	sizes := make([]int64, len(list))
	errs := make([]error, len(list))
	for {
		done := true
		for i, w := range list {
			sizes[i], errs[i] = w.size()
			if errs[i] != nil || sizes[i] != c.ResizeTo {
				done = false
			}
		}
		if done {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(poll):
			continue
		}
		break
	}
	waited := time.Since(start).Round(100 * time.Millisecond)
	for i, w := range list {
		err := errs[i]
		if err == nil {
			err = sizeMatches(fmt.Sprintf("after waiting %v, the size", waited), sizes[i], c.ResizeTo)
		}
		rs = append(rs, result{Name: w.name, Err: err})
	}
	if c.SkipBlock == "" {
		rs = append(rs,
			result{Name: "block: data written before the resize intact", Err: directVerify(c.Block, []int64{0, c.Size - blockSize}, 0x3c)},
			result{Name: "block: O_DIRECT write and read back at the new end", Err: directWriteReadBack(c.Block, []int64{c.ResizeTo - blockSize}, 0x5e)})
	}
	if c.QuotaEnforced {
		rs = append(rs, result{Name: "fs: write past the new size fails at exactly the limit, data before it intact", Err: fill(c.FS)})
	}
	return rs
}
