package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"source.plinth.dev/node/core"
	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes"
	"source.plinth.dev/node/kubernetes/capacity"
	"source.plinth.dev/node/kubernetes/noderemoval"
	"source.plinth.dev/node/kubernetes/provisioner"
	"source.plinth.dev/node/kubernetes/volumehealth"
)

// options are plinth-node's command-line flags.
type options struct {
	commonOptions
	root string

	dataDevice       string
	dataFSType       string
	dataMountOptions string

	// kube are the Kubernetes services' settings, passed down whole. An
	// empty Kubeconfig with inCluster uses the pod's service account:
	// plinth-node deployed as a DaemonSet (deploy/).
	kube      kubernetes.Options
	inCluster bool

	// configDevice is the configuration disk of a booted node (see
	// node/core/nodeconfig); booted.go says what it changes.
	configDevice string
}

// testOnlyFlagPrefix begins the names of flags that exist only for tests.
// They are left out of --help: no node has a use for them, and each
// disables something a node relies on.
const testOnlyFlagPrefix = "test-only-"

const usageHeader = `Usage: plinth-node [flags]
       plinth-node csi-serve [flags]   (standalone CSI plugin; see plinth-node csi-serve --help)

plinth-node is the node agent of Plinth: it prepares the node's data
partition and runs the node's storage services under a supervision tree.

As PID 1 (the node image's init) it first mounts /proc, /sys, /dev, /run and
the cgroup2 hierarchy, loads the kernel modules listed in
/etc/plinth/modules.list, then runs itself as a child with --root / and the
settings from the kernel command line (plinth.data=DEVICE, plinth.datafs=TYPE,
plinth.dataopts=OPTS, plinth.hostname=NAME, plinth.kubeletdir=DIR,
plinth.verbosity=N; init arguments after "--" are passed on as flags). It
reaps orphaned processes and, when its child ends, powers off (clean exit or
SIGTERM/SIGINT/SIGPWR) or, on failure, reboots after a delay
(plinth.onfailure=reboot|poweroff, plinth.haltdelay=DURATION, default 10s).

Otherwise it runs hosted under --root until SIGINT or SIGTERM, keeping every
directory it uses below the root (or below the directories given by flags).

Flags:
`

// parseOptions parses args (without the program name). It returns
// flag.ErrHelp after printing the usage when --help is asked for.
func parseOptions(args []string, out io.Writer) (*options, error) {
	o := &options{}
	fs := o.flagSet(out)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := flagsFromEnv(fs, os.LookupEnv); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q (flags go before nothing; subcommands come first)", fs.Args())
	}
	if err := o.complete(); err != nil {
		return nil, err
	}
	return o, nil
}

// flagSet declares every flag of plinth-node, bound to o's fields.
func (o *options) flagSet(out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("plinth-node", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.root, "root", "", "root directory of the node tree (required; \"/\" on a booted node)")
	o.commonOptions.declare(fs, dirDefaults{
		data:      "(default <root>/data)",
		ephemeral: "(default <root>/ephemeral)",
		kubelet:   "(default <root>/kubelet)",
	})
	fs.StringVar(&o.dataDevice, "data-device", "", "block device to mount at the data directory before starting (empty: use the directory as it is)")
	fs.StringVar(&o.dataFSType, "data-fstype", "xfs", "filesystem type of --data-device")
	fs.StringVar(&o.dataMountOptions, "data-mount-options", "prjquota", "mount options of --data-device (prjquota makes XFS enforce volume sizes)")
	fs.StringVar(&o.kube.Kubeconfig, "kubeconfig", "", "kubeconfig for the Kubernetes API (optional; without it and --in-cluster, no Kubernetes services run)")
	fs.BoolVar(&o.inCluster, "in-cluster", false, "reach the Kubernetes API with the pod's service account (plinth-node run as a DaemonSet, see deploy/); excludes --kubeconfig")
	o.node.NodeShare.Reserve = volume.DefaultShareReserve
	fs.Var(sizeFlag{&o.node.NodeShare.Reserve}, "node-share-reserve",
		"room on the data filesystem that volumes are never promised, kept for the kubelet's and containerd's directories (images, emptyDirs, logs) on a booted node; a Kubernetes quantity such as 1Gi or 0")
	fs.StringVar(&o.configDevice, "config-device", "", "configuration disk of a booted node (plinth.config=): a tar of node.json and kubeconfigs; the node then formats a blank data disk, configures the network and runs containerd and the kubelet")
	fs.Float64Var(&o.kube.QPS, "kube-api-qps", kubernetes.DefaultQPS, "queries per second to the Kubernetes API (client-side rate limit; Events have their own smaller budget)")
	fs.IntVar(&o.kube.Burst, "kube-api-burst", kubernetes.DefaultBurst, "burst of queries to the Kubernetes API above --kube-api-qps")
	fs.DurationVar(&o.kube.OrphanGracePeriod, "orphan-grace-period", provisioner.DefaultOrphanGracePeriod,
		"how long a volume must have had no PV and no claim before the provisioner acts on it: a crash leftover that never had a PV is removed, a volume whose Delete PV vanished is moved into quarantine")
	fs.DurationVar(&o.kube.OrphanRetention, "orphan-retention", provisioner.DefaultOrphanRetention,
		"how long a volume stays in quarantine (its Delete PV vanished without being released here) before its data is removed; a PV of its name made meanwhile gets it back")
	fs.DurationVar(&o.kube.RemovedNodeGracePeriod, "removed-node-grace-period", noderemoval.DefaultGracePeriod,
		"how long a node with Plinth volumes must have no Node object before its claims get a NodeRemoved Event and its released PVs are deleted (one surviving node acts)")
	fs.DurationVar(&o.kube.VolumeHealthInterval, "volume-health-interval", volumehealth.DefaultInterval,
		"how often the node checks its bound volumes (data present, quota in place, publications intact) and reports a change as an Event on the claim")
	fs.DurationVar(&o.kube.VolumeAuditInterval, "volume-audit-interval", volumehealth.DefaultAuditInterval,
		"how often the node walks every filesystem volume for files its users moved out of its project quota (chattr -p), puts them back and says so in an Event on the claim")
	fs.StringVar(&o.kube.CapacityNamespace, "capacity-namespace", capacity.DefaultNamespace,
		"namespace of the CSIStorageCapacity objects that tell the scheduler how much this node can still hold")
	// The help shows the flags declared so far: the test-only ones follow.
	help := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) {
		help.Var(f.Value, f.Name, f.Usage)
		help.Lookup(f.Name).DefValue = f.DefValue
	})
	fs.BoolVar(&o.kube.TestOnlyNoOrphanRemoval, testOnlyFlagPrefix+"no-orphan-removal", false,
		"never remove orphaned volumes, so that the crash test's negative control can show its leak check finds what a crash leaves")
	fs.Usage = func() {
		fmt.Fprint(out, usageHeader)
		help.SetOutput(out)
		help.PrintDefaults()
	}
	return fs
}

// sizeFlag is a flag holding a byte count, written as a Kubernetes
// quantity ("1Gi", "512Mi", "0"), as sizes are everywhere else in a
// cluster.
type sizeFlag struct{ bytes *int64 }

func (f sizeFlag) String() string {
	if f.bytes == nil {
		return ""
	}
	return resource.NewQuantity(*f.bytes, resource.BinarySI).String()
}

func (f sizeFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q is not a size such as 1Gi: %w", s, err)
	}
	n, ok := q.AsInt64()
	if !ok || n < 0 {
		return fmt.Errorf("%q is not a whole number of bytes from 0", s)
	}
	*f.bytes = n
	return nil
}

// envPrefix begins the environment variables that set flags: PLINTH_ and
// the flag's name in upper case with "_" for "-" (--kube-api-qps is
// PLINTH_KUBE_API_QPS). The DaemonSet of deploy/ takes them from an
// optional ConfigMap, so a cluster's settings live apart from the
// manifest.
const envPrefix = "PLINTH_"

// flagsFromEnv sets each flag that the command line left alone from its
// environment variable, if there is one: the command line wins. Test-only
// flags are never read from the environment.
func flagsFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] || strings.HasPrefix(f.Name, testOnlyFlagPrefix) {
			return
		}
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := lookup(name); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q (flag --%s): %w", name, v, f.Name, serr)
			}
		}
	})
	return err
}

// complete checks the options and fills in defaults.
func (o *options) complete() error {
	if o.root == "" {
		return errors.New("--root is required (use --root / only on a node booted into plinth-node)")
	}
	// A configuration disk names the node; it is read once the node
	// runs (booted.go).
	if o.configDevice == "" || o.node.NodeName != "" {
		if err := o.completeNodeName(); err != nil {
			return err
		}
	}
	if o.kube.QPS <= 0 || o.kube.Burst <= 0 || o.kube.OrphanGracePeriod <= 0 || o.kube.OrphanRetention <= 0 || o.kube.VolumeHealthInterval <= 0 || o.kube.VolumeAuditInterval <= 0 || o.kube.RemovedNodeGracePeriod <= 0 {
		return errors.New("--kube-api-qps, --kube-api-burst, --orphan-grace-period, --orphan-retention, --removed-node-grace-period, --volume-health-interval and --volume-audit-interval must be positive")
	}
	if o.verbosity < 0 {
		return fmt.Errorf("-v %d: verbosity cannot be negative", o.verbosity)
	}
	if o.inCluster && o.kube.Kubeconfig != "" {
		return errors.New("--in-cluster and --kubeconfig exclude each other")
	}
	if o.dataDevice != "" && o.dataFSType == "" {
		return errors.New("--data-device needs --data-fstype")
	}
	return nil
}

// commonOptions are the flags plinth-node and plinth-node csi-serve share:
// where the data, the runtime state and the kubelet live, who the node is,
// and how much to log. Declared once (declare), so the two modes cannot
// drift apart in a flag's name, type or meaning; each mode only says what an
// empty directory flag means there.
type commonOptions struct {
	dataDir      string
	ephemeralDir string
	kubeletDir   string

	// node is the root's configuration: the flags set its NodeName and
	// AllowUnenforcedCapacity; each mode adds the rest and passes it to
	// core.Root whole.
	node           core.Config
	verbosity      int
	metricsAddress string
}

// dirDefaults complete the help of the directory flags for one mode: what
// an empty --data-dir, --ephemeral-dir and --kubelet-dir mean, e.g.
// "(default <root>/data)" or "(required)".
type dirDefaults struct {
	data, ephemeral, kubelet string
}

// declare adds the common flags to fs, bound to c's fields.
func (c *commonOptions) declare(fs *flag.FlagSet, d dirDefaults) {
	fs.StringVar(&c.dataDir, "data-dir", "", "data directory (the data partition's mount point; volumes live in its volumes/ subdirectory) "+d.data)
	fs.StringVar(&c.ephemeralDir, "ephemeral-dir", "", "directory for runtime state that ends with the boot (such as CSI publication records), ideally on tmpfs "+d.ephemeral)
	fs.StringVar(&c.kubeletDir, "kubelet-dir", "", "the kubelet's root directory (its --root-dir); CSI target paths must lie below it "+d.kubelet)
	fs.StringVar(&c.node.NodeName, "node-name", "", "this node's Kubernetes node name, also its CSI node ID and topology value (default: the host name, lower-cased)")
	fs.BoolVar(&c.node.AllowUnenforcedCapacity, strings.TrimPrefix(volume.AllowUnenforcedCapacityFlag, "--"), false,
		"provision filesystem volumes even if the data filesystem cannot enforce their size (development hosts without project quotas; logs a loud warning)")
	fs.StringVar(&c.metricsAddress, "metrics-address", "", "serve Prometheus metrics (/metrics) and health (/healthz, /readyz) over HTTP on this host:port (empty: no endpoint)")
	fs.IntVar(&c.verbosity, "v", 0, "log verbosity: V(n) debug messages with n <= this level are logged (1 logs every successful CSI call)")
}

// completeNodeName defaults the node name to the host name, lower-cased,
// and checks it.
func (c *commonOptions) completeNodeName() error {
	if c.node.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("finding the node name (pass --node-name): %w", err)
		}
		c.node.NodeName = strings.ToLower(h)
	}
	return validateNodeName(c.node.NodeName)
}

// tree places the node tree: everything below --root, except the subtrees
// given their own directory by flag.
func (o *options) tree() (*localstorage.Root, error) {
	var r localstorage.Root
	root, err := filepath.Abs(o.root)
	if err != nil {
		return nil, fmt.Errorf("--root: %w", err)
	}
	if err := r.Place(root); err != nil {
		return nil, fmt.Errorf("placing node tree: %w", err)
	}
	for _, sub := range []struct {
		flag, dir string
		place     func(string) error
	}{
		{"--data-dir", o.dataDir, r.Data.Place},
		{"--ephemeral-dir", o.ephemeralDir, r.Ephemeral.Place},
		{"--kubelet-dir", o.kubeletDir, r.Kubelet.Place},
	} {
		if sub.dir == "" {
			continue
		}
		p, err := filepath.Abs(sub.dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sub.flag, err)
		}
		if err := sub.place(p); err != nil {
			return nil, fmt.Errorf("%s: %w", sub.flag, err)
		}
	}
	// The data tree at its resolved path: the volume layer compares its
	// paths with the kernel's, which are resolved (volume.New). The
	// kubelet's stays as given: it is the form of the paths the kubelet
	// sends.
	data, err := localstorage.Resolve(r.Data.FullPath())
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	if err := r.Data.Place(data); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	return &r, nil
}

// dataMount is the data partition to mount, if any.
func (o *options) dataMount() *core.DataMount {
	if o.dataDevice == "" {
		return nil
	}
	return &core.DataMount{Source: o.dataDevice, FSType: o.dataFSType, Options: o.dataMountOptions}
}

// nodeNamePattern is a DNS subdomain (RFC 1123), the rule for Kubernetes
// node names; checked here, without importing Kubernetes, so a booted
// machine with no host name ("(none)") fails at start with advice, not
// later with an API error.
var nodeNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func validateNodeName(name string) error {
	if len(name) > 253 || !nodeNamePattern.MatchString(name) {
		return fmt.Errorf("node name %q is not a valid Kubernetes node name (lower-case letters, digits, '-' and '.', at most 253 characters); pass --node-name", name)
	}
	return nil
}
