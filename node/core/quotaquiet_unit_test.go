package core

import (
	"slices"
	"testing"
)

// TestJudgeTellsMovesFromWrites checks the usage check's rule alone (the
// VM's TestQuotaWatchFindsQuietMove checks it against the kernel): growth
// with no event, or by more inodes than were created, is a move in; a
// volume being made is not; shrinking with no event, or fewer inodes
// than were created less those removed, is a volume to walk for a move
// out; a user's own creations and removals are neither.
func TestJudgeTellsMovesFromWrites(t *testing.T) {
	for _, tc := range []struct {
		name        string
		c           usageChange
		seen, after eventCount
		quiet, fell bool
	}{
		{"grew, no event", usageChange{bytes: 4096}, eventCount{}, eventCount{}, true, false},
		{"grew, event in the interval", usageChange{bytes: 4096}, eventCount{any: 1}, eventCount{}, false, false},
		{"grew, event read after the poll", usageChange{bytes: 4096}, eventCount{}, eventCount{any: 1}, false, false},
		{"one inode more than created, while written", usageChange{bytes: 4096, inodes: 1}, eventCount{any: 8}, eventCount{}, true, false},
		{"as many inodes as created", usageChange{bytes: 8192, inodes: 2}, eventCount{any: 2, created: 1}, eventCount{any: 1, created: 1}, false, false},
		{"a volume being made", usageChange{inodes: 1, fresh: true}, eventCount{}, eventCount{}, false, false},
		{"a volume made with a file moved in", usageChange{bytes: 4096, inodes: 2, fresh: true}, eventCount{}, eventCount{}, true, false},
		{"shrank", usageChange{bytes: -4096, inodes: -1}, eventCount{}, eventCount{}, false, true},
		{"fewer inodes than created", usageChange{bytes: 4096, inodes: 1}, eventCount{any: 3, created: 2}, eventCount{}, false, true},
		// A user who creates and removes files all along: the inode
		// moved in shows against what the events account for.
		{"one inode more than created less removed", usageChange{bytes: 4096, inodes: 1}, eventCount{any: 20, created: 10, removed: 10}, eventCount{any: 2, created: 1, removed: 1}, true, false},
		{"created and removed as many", usageChange{}, eventCount{any: 20, created: 10, removed: 10}, eventCount{}, false, false},
		{"removed, and the removal seen", usageChange{bytes: -4096, inodes: -1}, eventCount{any: 1, removed: 1}, eventCount{}, false, false},
		{"one inode less than created less removed", usageChange{bytes: -4096, inodes: -1}, eventCount{any: 10, created: 5, removed: 5}, eventCount{}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quiet, fell := judge(map[uint32]usageChange{7: tc.c}, map[uint32]eventCount{7: tc.seen}, map[uint32]eventCount{7: tc.after})
			if slices.Contains(quiet, 7) != tc.quiet || slices.Contains(fell, 7) != tc.fell {
				t.Errorf("judge(%+v, seen %+v, after %+v): quiet %v, fell %v; want quiet %v, fell %v", tc.c, tc.seen, tc.after, quiet, fell, tc.quiet, tc.fell)
			}
		})
	}
}
