package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// ControlPlaneConfig says how to start a control plane without a node.
type ControlPlaneConfig struct {
	// Dir is the work directory; it must not exist or be empty. Keep it
	// short (unix socket paths).
	Dir string
	// KubernetesBin: see Config.KubernetesBin.
	KubernetesBin string
	// ControllerManagerArgs are extra kube-controller-manager flags, e.g.
	// --kube-api-qps for a benchmark whose PV binding must not be limited
	// by the controller manager's client.
	ControllerManagerArgs []string
	// AuditGroups, if set, makes the API server keep an audit log of the
	// requests of members of these groups (see AuditEvents).
	AuditGroups []string
	// AuditUsers, if set, audits the requests of these users too.
	AuditUsers []string
	// Scheduler also starts kube-scheduler, and StorageObjects creates the
	// CSIDriver and the default StorageClass: what a node joining from
	// outside this host's process tree (a VM, see RemoteNode) needs for
	// pods with claims.
	Scheduler      bool
	StorageObjects bool
	// SnapshotAPI also installs the snapshot.storage.k8s.io CRDs and
	// starts the snapshot-controller (see Config.SnapshotBin, which
	// SnapshotBin is): what a cluster with a node has.
	SnapshotAPI bool
	SnapshotBin string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// ControlPlane is etcd, kube-apiserver and kube-controller-manager with the
// same certificates, identities and RBAC as a full Cluster, but no node: no
// kubelet, containerd, data filesystem or host-wide lock. It starts in a few
// seconds, needs no root, and several can run at once, which is what
// controller tests want (real API semantics, nothing else).
//
// Paths.NodeName is the host's name, but no Node object exists unless a
// test creates one; Paths.NodeIP is empty. DataDir, KubeletRootDir and the
// containerd paths are unused. It needs only etcd, kube-apiserver and
// kube-controller-manager in KubernetesBin, and no network but loopback.
type ControlPlane struct {
	*Cluster
}

// StartControlPlane starts a control plane and returns once the apiserver
// is ready and the controller manager runs.
func StartControlPlane(ctx context.Context, cfg ControlPlaneConfig) (cp *ControlPlane, err error) {
	if cfg.Dir == "" {
		return nil, errors.New("launch: ControlPlaneConfig.Dir is empty")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving work directory: %w", err)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("control plane work directory %s is not empty", dir)
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	c := &Cluster{
		cfg:  Config{Dir: dir, KubernetesBin: cfg.KubernetesBin, SnapshotBin: cfg.SnapshotBin},
		logw: logw, failed: make(chan struct{}), started: time.Now(), snapshots: cfg.SnapshotAPI,
	}
	c.Dir = dir
	cp = &ControlPlane{Cluster: c}
	defer func() {
		if err != nil {
			_ = cp.Stop(context.Background())
			cp = nil
		}
	}()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return cp, fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := c.initPaths(ctx, false); err != nil {
		return cp, err
	}
	if len(cfg.AuditGroups)+len(cfg.AuditUsers) > 0 {
		if c.apiServerArgs, err = c.auditArgs(cfg.AuditGroups, cfg.AuditUsers); err != nil {
			return cp, err
		}
		c.audited = true
	}
	if err := c.startEtcd(); err != nil {
		return cp, err
	}
	if err := c.waitFor(ctx, "etcd", 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		return httpOK(ctx, c.etcdURL+"/health", nil)
	}); err != nil {
		return cp, err
	}
	if err := c.startAPIServer(); err != nil {
		return cp, err
	}
	if err := c.waitAPIServerReady(ctx); err != nil {
		return cp, err
	}
	c.mark("kube-apiserver ready")
	args := append([]string{
		"--kubeconfig=" + c.kubeconfigPath("controller-manager"),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + c.pki.SAKeyPath,
		"--root-ca-file=" + c.pki.CA.CertPath,
		"--pvclaimbinder-sync-period=2s",
		"--v=1",
	}, cfg.ControllerManagerArgs...)
	if err := c.run("kube-controller-manager", filepath.Join(c.BinDir, "kube-controller-manager"), args, []string{hostPATH}); err != nil {
		return cp, err
	}
	if cfg.Scheduler {
		if err := c.startScheduler(); err != nil {
			return cp, err
		}
	}
	if err := c.startAdmission(); err != nil {
		return cp, err
	}
	if err := c.applyRBAC(ctx); err != nil {
		return cp, err
	}
	if cfg.StorageObjects {
		if err := c.applyStorageObjects(ctx); err != nil {
			return cp, err
		}
	}
	if cfg.SnapshotAPI {
		if err := c.startSnapshotAPI(ctx); err != nil {
			return cp, err
		}
	}
	c.mark("control plane ready")
	return cp, nil
}

// StartSnapshotAPI installs the snapshot API (the CRDs, then the
// snapshot-controller; see ControlPlaneConfig.SnapshotAPI) in a control
// plane started without it, as an administrator adds it to a running
// cluster: for tests of what waits for it.
func (cp *ControlPlane) StartSnapshotAPI(ctx context.Context) error {
	c := cp.Cluster
	dir, err := c.snapshotBinaries(ctx)
	if err != nil {
		return err
	}
	c.SnapshotBin = dir
	return c.startSnapshotAPI(ctx)
}

// Stop stops the components (newest first) and removes the work directory
// except its logs. It is safe to call more than once.
func (cp *ControlPlane) Stop(ctx context.Context) error {
	c := cp.Cluster
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	procs := append([]*process(nil), c.procs...)
	c.mu.Unlock()
	errs := c.stopComponents(procs)
	if c.Dir != "" && c.LogDir != "" {
		if err := removeAllBut(c.Dir, "logs"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
