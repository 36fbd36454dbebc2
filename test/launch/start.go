package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch/host"
	"source.plinth.dev/test/launch/pki"
)

// kubeletTools are the host programs the kubelet may run; see
// Paths.KubeletPATH. mount/umount do bind and tmpfs mounts, du/find and
// nice/ionice serve volume metrics. losetup is missing on purpose: the
// patched kubelet must never need it, and a test proves it.
var kubeletTools = []string{"mount", "umount", "findmnt", "blkid", "blockdev", "du", "find", "nice", "ionice", "nsenter"}

// Start launches a cluster and returns once its node is Ready and the
// default service account exists (pods can be created). On error, whatever
// was started is torn down again.
func Start(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("launching a cluster needs root (kubelet, containerd, mounts)")
	}
	if cfg.Dir == "" {
		return nil, errors.New("launch: Config.Dir is empty")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving work directory: %w", err)
	}
	if cfg.DataSize == 0 {
		cfg.DataSize = DefaultDataSize
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	c = &Cluster{cfg: cfg, logw: logw, failed: make(chan struct{}), started: time.Now(), snapshots: true}
	c.Dir = dir

	lock, prev, err := acquireLock(ctx, cfg.WaitForLock, c.logf)
	if err != nil {
		return nil, err
	}
	c.lock = lock
	defer func() {
		if err != nil {
			if stopErr := c.Stop(context.Background()); stopErr != nil {
				c.logf("teardown after failed start: %v", stopErr)
			}
			c = nil
		}
	}()
	if prev.Dir != "" {
		// The last launcher died without tearing down.
		c.logf("cleaning up after a launcher that did not stop cleanly (work directory %s)", prev.Dir)
		if err := host.Sweep(prev.Dir, prev.Baseline); err != nil {
			c.logf("cleanup of %s incomplete: %v", prev.Dir, err)
		}
		c.base = prev.Baseline
	} else {
		c.base = host.TakeBaseline()
	}
	if err := writeLockState(lock, &lockState{PID: os.Getpid(), Dir: dir, Baseline: c.base}); err != nil {
		return c, err
	}
	if err := prepareDir(dir, c.base); err != nil {
		return c, err
	}
	if err := c.initPaths(ctx, true); err != nil {
		return c, err
	}
	if len(cfg.AuditGroups)+len(cfg.AuditUsers) > 0 {
		if c.apiServerArgs, err = c.auditArgs(cfg.AuditGroups, cfg.AuditUsers); err != nil {
			return c, err
		}
		c.audited = true
	}
	if err := c.startAll(ctx); err != nil {
		return c, err
	}
	return c, nil
}

// The Kubernetes binaries a control plane runs, and the ones a node adds.
var (
	controlPlaneBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager"}
	nodeBinaries         = []string{"kube-scheduler", "kubelet", "kubectl"}
)

// initPaths settles names, ports and directories and writes all files.
// Without node (a ControlPlane), it needs neither a node IP nor CNI
// plugins nor the node's binaries, which is what lets a control plane run
// where there is no network but loopback (the kernel-test VM).
func (c *Cluster) initPaths(ctx context.Context, node bool) error {
	var err error
	if c.NodeName, err = nodeName(); err != nil {
		return err
	}
	if node {
		if c.NodeIP, err = nodeIP(); err != nil {
			return err
		}
	}
	c.BinDir = c.cfg.KubernetesBin
	if c.BinDir == "" {
		if c.BinDir, err = KubernetesBinaries(ctx, c.logw); err != nil {
			return err
		}
	}
	bins := controlPlaneBinaries
	if node {
		bins = append(slices.Clone(bins), nodeBinaries...)
	}
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(c.BinDir, b)); err != nil {
			return fmt.Errorf("kubernetes binaries in %s: %w", c.BinDir, err)
		}
	}
	if c.snapshots {
		if c.SnapshotBin, err = c.snapshotBinaries(ctx); err != nil {
			return err
		}
	}
	if c.GVisorBin = c.cfg.GVisorBin; c.GVisorBin != "" {
		if err := checkGVisorBinaries(c.GVisorBin); err != nil {
			return err
		}
	}
	if node {
		c.cniBinDir = "/usr/lib/cni"
		if _, err := os.Stat(filepath.Join(c.cniBinDir, "bridge")); err != nil {
			return fmt.Errorf("CNI plugins: %w (install containernetworking-plugins)", err)
		}
	}
	ports, err := FreePorts(5)
	if err != nil {
		return err
	}
	c.etcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	c.etcdPeerURL = "http://127.0.0.1:" + strconv.Itoa(ports[1])
	c.apiPort, c.kubeletPort = ports[2], ports[3]
	c.PlinthNodeMetrics = "127.0.0.1:" + strconv.Itoa(ports[4])
	c.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(c.apiPort)

	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	c.NodeKubeconfig = filepath.Join(c.Dir, "kubeconfigs", "plinth-node.kubeconfig")
	c.DataDir = filepath.Join(c.Dir, "data")
	c.KubeletRootDir = filepath.Join(c.DataDir, "kubelet")
	c.KubeletPATH = filepath.Join(c.Dir, "kubelet-path")
	c.ContainerdSocket = filepath.Join(c.Dir, "run", "containerd.sock")
	c.LogDir = filepath.Join(c.Dir, "logs")
	for _, d := range []string{c.LogDir, c.KubeletPATH, filepath.Join(c.Dir, "kubeconfigs"), filepath.Join(c.Dir, "run"), filepath.Join(c.Dir, "images")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	tools := kubeletTools
	if c.cfg.UpstreamKubelet != "" {
		// The unpatched kubelet takes its block-volume pseudo-locks with
		// losetup; without it, it fails to map block volumes.
		tools = append(slices.Clip(tools), "losetup")
	}
	for _, tool := range tools {
		if p, err := exec.LookPath(tool); err == nil {
			if err := os.Symlink(p, filepath.Join(c.KubeletPATH, tool)); err != nil {
				return fmt.Errorf("preparing kubelet PATH: %w", err)
			}
		}
	}

	// The API server and the kubelet serve on loopback and, with a node,
	// on the node IP.
	serveIPs := []net.IP{net.IPv4(127, 0, 0, 1)}
	if node {
		serveIPs = append(serveIPs, net.ParseIP(c.NodeIP))
	}
	c.pki, err = pki.New(filepath.Join(c.Dir, "pki"), []pki.Identity{
		{Name: "apiserver", CN: "kube-apiserver", Server: true,
			DNS: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", c.NodeName},
			// GuestHostIP: a VM node on qemu's user network reaches the
			// apiserver there.
			IPs: append([]net.IP{net.IPv4(10, 96, 0, 1), net.ParseIP(GuestHostIP)}, serveIPs...)},
		{Name: "admin", CN: "plinth-admin", Orgs: []string{"system:masters"}},
		{Name: "controller-manager", CN: "system:kube-controller-manager"},
		{Name: "scheduler", CN: "system:kube-scheduler"},
		{Name: "snapshot-controller", CN: "plinth-snapshot-controller", Orgs: []string{"system:masters"}},
		{Name: "kubelet", CN: "system:node:" + c.NodeName, Orgs: []string{"system:nodes"}},
		{Name: "kubelet-serving", CN: c.NodeName, Server: true, DNS: []string{c.NodeName, "localhost"}, IPs: serveIPs},
		{Name: "apiserver-kubelet-client", CN: "kube-apiserver-kubelet-client", Orgs: []string{"system:masters"}},
		{Name: "plinth-node", CN: clusterobjects.NodeAgentUser(c.NodeName), Orgs: []string{plinthNodeGroup}},
		{Name: "plinth-admission", CN: clusterobjects.AdmissionUser},
		{Name: "plinth-admission-serving", CN: "plinth-admission", Server: true, DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}},
	})
	if err != nil {
		return err
	}
	if err := c.writeConfigs(node); err != nil {
		return err
	}
	c.RESTConfig = &rest.Config{
		Host: c.APIServerURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:   c.pki.CA.CertPath,
			CertFile: c.pki.Get("admin").CertPath,
			KeyFile:  c.pki.Get("admin").KeyPath,
		},
		QPS:   50,
		Burst: 100,
	}
	c.Client, err = kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	c.mark("prepared")
	return nil
}

// startAll brings the components up in dependency order, overlapping what
// does not depend on each other (containerd and the images with the control
// plane).
func (c *Cluster) startAll(ctx context.Context) error {
	data, err := mountDataFS(ctx, filepath.Join(c.Dir, "data.img"), c.DataDir, c.cfg.DataSize, c.cfg.DataDirectIO)
	if err != nil {
		return err
	}
	c.QuotaEnforced = data.quota
	if !data.quota {
		c.logf("this kernel cannot enforce XFS project quotas (no CONFIG_XFS_QUOTA); data filesystem mounted without them")
	}
	c.mark("data filesystem mounted")

	if err := c.startEtcd(); err != nil {
		return err
	}
	if err := c.startContainerd(); err != nil {
		return err
	}
	imported := make(chan error, 1)
	go func() { imported <- c.importImages(ctx) }()

	if err := c.waitFor(ctx, "etcd", 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		return httpOK(ctx, c.etcdURL+"/health", nil)
	}); err != nil {
		return err
	}
	c.mark("etcd healthy")
	if err := c.startAPIServer(); err != nil {
		return err
	}
	if err := c.waitAPIServerReady(ctx); err != nil {
		return err
	}
	c.mark("kube-apiserver ready")
	if err := c.startControllers(); err != nil {
		return err
	}
	if !c.cfg.NoAdmissionWebhook {
		if err := c.startAdmission(); err != nil {
			return err
		}
	}
	if err := c.applyRBAC(ctx); err != nil {
		return err
	}
	if err := c.applyStorageObjects(ctx); err != nil {
		return err
	}
	if err := c.applyRuntimeClasses(ctx); err != nil {
		return err
	}
	if err := c.startSnapshotAPI(ctx); err != nil {
		return err
	}
	// Pods are rejected until their namespace's default service account
	// exists. The controller manager would create it a few seconds after
	// its start; creating it here makes the cluster usable that much sooner.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: metav1.NamespaceDefault}}
	if err := c.waitFor(ctx, "service account default/default", 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(ctx, sa, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), err // the namespace may not exist yet
	}); err != nil {
		return err
	}
	if err := <-imported; err != nil {
		return err
	}
	c.mark("images imported")
	if err := c.startKubelet(); err != nil {
		return err
	}
	if c.cfg.PlinthNode != nil {
		if err := c.startPlinthNode(); err != nil {
			return err
		}
	}
	if err := c.waitFor(ctx, "node "+c.NodeName+" Ready", 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, fmt.Errorf("node not ready: %s", cond.Message)
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	c.mark("node Ready")
	c.mark("ready for pods")
	return nil
}

func (c *Cluster) run(name, bin string, args []string, env []string) error {
	p, err := startProcess(name, c.LogDir, bin, args, env, c.fail)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return nil
}

// hostPATH is the PATH of containerd (runc, shims) and other tools.
const hostPATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// waitAPIServerReady waits until kube-apiserver answers /readyz with ok.
func (c *Cluster) waitAPIServerReady(ctx context.Context) error {
	return c.waitFor(ctx, "kube-apiserver /readyz", 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", err
	})
}

func (c *Cluster) startEtcd() error {
	return c.run("etcd", filepath.Join(c.BinDir, "etcd"), []string{
		"--name=" + etcdName,
		"--data-dir=" + c.etcdDataDir(),
		"--listen-client-urls=" + c.etcdURL,
		"--advertise-client-urls=" + c.etcdURL,
		"--listen-peer-urls=" + c.etcdPeerURL,
		"--initial-advertise-peer-urls=" + c.etcdPeerURL,
		"--initial-cluster=plinth=" + c.etcdPeerURL,
		// The data is thrown away at teardown; fsync only costs time.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}, []string{hostPATH})
}

// startAPIServer starts kube-apiserver. It advertises the node IP as
// the address of the kubernetes Service, which pods use. A control plane
// has no node and no pods: it advertises loopback and keeps no endpoints
// for that Service (they may not be loopback addresses), so it needs no
// address beyond loopback.
func (c *Cluster) startAPIServer() error {
	p := c.pki
	advertise := []string{"--advertise-address=" + c.NodeIP}
	if c.NodeIP == "" {
		advertise = []string{"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"}
	}
	args := slices.Concat([]string{
		"--etcd-servers=" + c.etcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.apiPort),
		"--tls-cert-file=" + p.Get("apiserver").CertPath,
		"--tls-private-key-file=" + p.Get("apiserver").KeyPath,
		"--client-ca-file=" + p.CA.CertPath,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.SAPubPath,
		"--service-account-signing-key-file=" + p.SAKeyPath,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--kubelet-client-certificate=" + p.Get("apiserver-kubelet-client").CertPath,
		"--kubelet-client-key=" + p.Get("apiserver-kubelet-client").KeyPath,
		"--kubelet-certificate-authority=" + p.CA.CertPath,
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--cert-dir=" + filepath.Join(c.Dir, "run", "apiserver"),
		"--profiling=false",
		// Webhooks and aggregated APIs are called at their Services'
		// endpoints: no kube-proxy gives this host their cluster IPs.
		"--enable-aggregator-routing=true",
		"--v=1",
	}, advertise, c.apiServerArgs)
	return c.run("kube-apiserver", filepath.Join(c.BinDir, "kube-apiserver"), args, []string{hostPATH})
}

func (c *Cluster) startControllers() error {
	p := c.pki
	kcm := c.kubeconfigPath("controller-manager")
	if err := c.run("kube-controller-manager", filepath.Join(c.BinDir, "kube-controller-manager"), append([]string{
		"--kubeconfig=" + kcm,
		// One instance: leader election would only delay the start.
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.SAKeyPath,
		"--root-ca-file=" + p.CA.CertPath,
		"--cluster-signing-cert-file=" + p.CA.CertPath,
		"--cluster-signing-key-file=" + p.CA.KeyPath,
		// Bind claims to volumes within 2 s instead of 15 s.
		"--pvclaimbinder-sync-period=2s",
		"--v=1",
	}, c.cfg.ControllerManagerArgs...), []string{hostPATH}); err != nil {
		return err
	}
	return c.startScheduler()
}

func (c *Cluster) startScheduler() error {
	return c.run("kube-scheduler", filepath.Join(c.BinDir, "kube-scheduler"), []string{
		"--kubeconfig=" + c.kubeconfigPath("scheduler"),
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1",
	}, []string{hostPATH})
}

func (c *Cluster) startContainerd() error {
	cfg := c.containerdConfig()
	if err := cfg.WriteConfig(); err != nil {
		return err
	}
	return c.run("containerd", "/usr/bin/containerd", []string{"--config=" + cfg.ConfigFile}, []string{c.containerdPATH()})
}

func (c *Cluster) startKubelet() error {
	cfg, err := c.kubeletConfig()
	if err != nil {
		return err
	}
	args, err := cfg.WriteFiles()
	if err != nil {
		return err
	}
	args = append(args, "--cert-dir="+filepath.Join(c.Dir, "run", "kubelet-pki"), "--v=2")
	args = append(args, c.cfg.KubeletArgs...)
	kubelet := filepath.Join(c.BinDir, "kubelet")
	if c.cfg.UpstreamKubelet != "" {
		kubelet = c.cfg.UpstreamKubelet
	}
	return c.run("kubelet", kubelet, args, []string{"PATH=" + c.KubeletPATH})
}

func (c *Cluster) startPlinthNode() error {
	pn := c.cfg.PlinthNode
	args := PlinthNodeArgs(c.Paths)
	if pn.Args != nil {
		args = pn.Args(c.Paths)
	}
	return c.run("plinth-node", pn.Binary, args, []string{hostPATH})
}

// importImages builds the pause, busybox and persistentvolume (the e2e
// workload) images and loads them, with the configured extra images, into
// containerd's k8s.io namespace (the one the CRI plugin uses).
func (c *Cluster) importImages(ctx context.Context) error {
	root, err := RepoRoot(".")
	if err != nil {
		return err
	}
	pause, err := images.Pause(ctx, root)
	if err != nil {
		return err
	}
	busybox, err := images.Busybox(ctx, images.DefaultBusybox)
	if err != nil {
		return err
	}
	workload, err := images.PersistentVolume(ctx, root)
	if err != nil {
		return err
	}
	paths := []string{}
	for name, img := range map[string]images.Image{"pause": pause, "busybox": busybox, "persistentvolume": workload} {
		p := filepath.Join(c.Dir, "images", name+".tar")
		if err := img.WriteFile(p); err != nil {
			return err
		}
		paths = append(paths, p)
	}
	paths = append(paths, c.cfg.Images...)
	if err := c.waitFor(ctx, "containerd socket", 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := exec.CommandContext(ctx, "ctr", "--address", c.ContainerdSocket, "version").Run()
		return err == nil, err
	}); err != nil {
		return err
	}
	for _, p := range paths {
		// The way `kind load image-archive` imports on each node (all
		// platforms, digests kept, from standard input), so that every
		// launch proves the project's archives load there too.
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("importing image %s: %w", p, err)
		}
		cmd := exec.CommandContext(ctx, "ctr", "--address", c.ContainerdSocket, "--namespace", "k8s.io", "images", "import", "--all-platforms", "--digests", "-")
		cmd.Stdin = f
		out, err := cmd.CombinedOutput()
		f.Close()
		if err != nil {
			return fmt.Errorf("importing image %s: %w: %s", p, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// httpOK reports whether GET url answers 200.
func httpOK(ctx context.Context, url string, client *http.Client) (bool, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK, nil
}
