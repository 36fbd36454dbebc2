package storagesuite

import (
	"regexp"
	"sort"
	"testing"
)

// allowedSkips are the skips a run may have, each with the capability
// Plinth lacks that explains it. A skip matching none fails the test.
var allowedSkips = []struct {
	pattern *regexp.Regexp
	why     string
}{
	{regexp.MustCompile(`does not support ROX access mode`), "no ReadOnlyMany: a volume is one node's"},
	{regexp.MustCompile(`^Test is not valid for Block volume mode`), "the suite's own: it checks a restored filesystem's size"},
	{regexp.MustCompile(`^volume type "[A-Za-z]+" is (not )?ephemeral`), "the suite's own: its persistent and ephemeral snapshot specs each run for one kind of pattern"},
	{regexp.MustCompile(`does not support volume type "CSIInlineVolume"`), "no CSI ephemeral inline volumes: the CSIDriver lists the Persistent lifecycle only"},
	{regexp.MustCompile(`does not support volume type "InlineVolume"`), "in-tree inline volumes are not a CSI driver's; the suite defines none for an external driver"},
	{regexp.MustCompile(`does not support volume type "PreprovisionedPV"`), "no pre-provisioned PVs: a Plinth volume exists only through its provisioner, and the suite offers none for an external driver"},
	{regexp.MustCompile(`doesn't support ext[34]`), "no fsType: a filesystem volume is a directory on the node's XFS"},
	{regexp.MustCompile(`does not support volume limits`), "no attach limit: NodeGetInfo sets no max_volumes_per_node"},
	{regexp.MustCompile(`^Block volumes do not support mount options`), "mount options do not apply to raw block volumes"},
	{regexp.MustCompile(`^raw block volumes cannot be read-only`), "Kubernetes has no read-only raw block ephemeral volume"},
	{regexp.MustCompile(`^skipping multiple PV mount test for block mode`), "the suite mounts two PVs of one handle for filesystems only"},
	{regexp.MustCompile(`^Suite "volumeLimits" does not support GenericEphemeralVolume`), "the suite's own pattern limit"},
	{regexp.MustCompile(`^Not enough topologies in cluster`), "the spec needs two nodes; the test cluster has one"},
	{regexp.MustCompile(`^VolumeBindingMode immediate is not compatible with a multi-topology environment|^Multiple generic ephemeral volumes with immediate binding`),
		"the suite's own: it runs no generic ephemeral volume of an Immediate class for a driver with topology"},
}

// allowedSkip returns why a skip message is acceptable, or "".
func allowedSkip(msg string) string {
	for _, a := range allowedSkips {
		if a.pattern.MatchString(msg) {
			return a.why
		}
	}
	return ""
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestAllowedSkip checks that a skip for a capability Plinth lacks is
// allowed and one for a capability it has is not.
func TestAllowedSkip(t *testing.T) {
	if why := allowedSkip("Driver \"storage.plinth.dev\" does not support ROX access mode - skipping"); why == "" {
		t.Errorf("the ReadOnlyMany skip is not allowed; it names a capability Plinth lacks")
	}
	for _, msg := range []string{
		"Driver \"storage.plinth.dev\" does not support cloning - skipping",
		"Driver \"storage.plinth.dev\" does not support snapshots - skipping",
		"Driver \"storage.plinth.dev\" does not support populating data from snapshot - skipping",
	} {
		if why := allowedSkip(msg); why != "" {
			t.Errorf("the skip %q is allowed (%s), but Plinth has snapshots and clones", msg, why)
		}
	}
	if why := allowedSkip("Driver \"storage.plinth.dev\" does not support block volume mode - skipping"); why != "" {
		t.Errorf("a block-mode skip is allowed (%s), but Plinth has block volumes", why)
	}
}
