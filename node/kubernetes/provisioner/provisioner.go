// Package provisioner turns PersistentVolumeClaims scheduled to this node into
// node-local volumes and PersistentVolumes, and deletes the volumes of
// released PVs whose reclaim policy is Delete.
//
// It runs as one supervised runnable per node. It never touches the disk
// itself: every volume operation goes through the volume package, which owns
// the on-disk layout and makes Create and Delete idempotent and crash-safe.
// This package adds the Kubernetes half of crash safety:
//
//   - Names are derived, not generated: the volume ID, the CSI handle and the
//     PV name are all "pvc-<claim UID>". A retried or resumed provisioning
//     finds the volume and PV of its earlier attempt instead of making new
//     ones, so one claim can never own two volumes.
//   - Order: the volume first, then the PV. A crash in between leaves a
//     volume without a PV; the next run either finishes the job (the claim is
//     still pending) or, once the claim is gone, removes the volume as an
//     orphan after a grace period. A PV never points at a volume that was
//     not created.
//   - Deletion: data first, PV last, each step idempotent, so a crash during
//     deletion is finished by the next run (the PV is still Released).
//   - Nothing bound is ever touched: data is only removed for a PV the API
//     server reports (live, not from cache) as Released with policy Delete,
//     or for a volume that no PV and no claim refers to, and then only
//     after a quarantine if a Delete PV of it was ever seen (orphans.go),
//     and never while the node is connected to another cluster than the
//     one its volumes were made in (quarantine.go).
package provisioner

import (
	"context"
	"errors"
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/controller"
)

// Event reasons. They are part of the user interface (kubectl describe,
// alerts), so they never change once released.
const (
	ReasonProvisioningFailed    = "ProvisioningFailed"
	ReasonProvisioningSucceeded = "ProvisioningSucceeded"
	ReasonCapacityNotEnforced   = "CapacityNotEnforced"
	ReasonVolumeDeleted         = "VolumeDeleted"
	ReasonVolumeDeleteFailed    = "VolumeDeleteFailed"
	ReasonOrphanDeleted         = "OrphanedVolumeDeleted"
	ReasonOrphanRetained        = "OrphanedVolumeRetained"
	// ReasonOrphanQuarantined: a volume whose Delete PV vanished was
	// moved into quarantine, and ReasonOrphanRestored: it came back
	// because its PV or claim did.
	ReasonOrphanQuarantined = "OrphanedVolumeQuarantined"
	ReasonOrphanRestored    = "OrphanedVolumeRestored"
	// ReasonOtherCluster: the node is connected to another cluster than
	// the one its volumes were made for, and deletes nothing of them.
	ReasonOtherCluster = "VolumesOfAnotherCluster"
	// ReasonVolumeMadeElsewhere: the claim's PV exists, but another node
	// (or someone else) made it, not this node, on which the claim was
	// placed.
	ReasonVolumeMadeElsewhere = "VolumeMadeElsewhere"
)

// Defaults for the Config's optional fields.
const (
	DefaultClaimWorkers      = 16
	DefaultVolumeWorkers     = 4
	DefaultOrphanGracePeriod = 10 * time.Minute
	// DefaultOrphanRetention is long enough for an operator to notice a
	// restore gone wrong over a weekend and put the PVs back.
	DefaultOrphanRetention = 7 * 24 * time.Hour
)

// Volumes is the part of the volume manager (*volume.Manager) the
// provisioner uses. Create and Delete are idempotent and resumable after a
// crash at any point; that is what makes the controller's retries safe.
type Volumes interface {
	Create(ctx context.Context, id string, mode volume.Mode, bytes int64, opts ...volume.CreateOption) (volume.Info, error)
	Delete(ctx context.Context, id string) error
	List(ctx context.Context) ([]volume.Entry, error)
	// SetReclaimPolicy and ReclaimPolicy keep the reclaim policy of a
	// volume's PV on the node, so the orphan reconciler still knows it
	// after the PV is gone (an administrator deleted a Retain PV).
	SetReclaimPolicy(ctx context.Context, id string, p volume.ReclaimPolicy) error
	ReclaimPolicy(ctx context.Context, id string) (volume.ReclaimPolicy, error)
	// Quarantine, Restore, Quarantined and DeleteQuarantined keep the
	// volumes whose Delete PV vanished (see quarantine.go).
	Quarantine(ctx context.Context, id string, now time.Time) error
	Restore(ctx context.Context, id string) error
	Quarantined(ctx context.Context) ([]volume.QuarantinedVolume, error)
	DeleteQuarantined(ctx context.Context, id string) error
	// ClusterID and RecordCluster keep the cluster the volumes are of.
	ClusterID() (string, error)
	RecordCluster(id string) (string, error)
	// Space measures what the data filesystem can still hold, by the
	// accounting Create admits volumes with.
	Space(ctx context.Context) (volume.Space, error)
	// Changed is closed after the next change to the data filesystem
	// (see volume.Manager.Changed).
	Changed() <-chan struct{}
	// CapacityEnforced is false when filesystem volumes get no quota (the
	// operator allowed that, or Create refuses them).
	CapacityEnforced() bool
	// UnenforcedCapacity says why not, and whether Create makes
	// filesystem volumes anyway (see volume.Manager).
	UnenforcedCapacity() (reason error, allowed bool)
}

// Config is what a Controller needs: the fields every controller has
// (Client, Driver and NodeName required), and Volumes.
type Config struct {
	controller.Base
	// Volumes creates and deletes volumes on this node's data directory.
	Volumes Volumes
	// Snapshots reads the VolumeSnapshots and contents claims are
	// restored from (restore.go).
	Snapshots snapclient.Interface

	// ClaimWorkers and VolumeWorkers are the number of concurrent
	// provisioning and deletion workers.
	ClaimWorkers, VolumeWorkers int
	// OrphanGracePeriod is how long a volume must have had no PV and no claim
	// before it is removed. It covers the lag of the informers and the time
	// between creating a volume and creating its PV.
	OrphanGracePeriod time.Duration
	// OrphanRetention is how long a quarantined volume is kept before
	// its data is removed.
	OrphanRetention time.Duration
	// TestOnlyNoOrphanRemoval turns the orphan reconciler off, so volumes
	// a crash leaves without PV and claim stay. Only for tests: the crash
	// test's negative control runs without it to show that its leak check
	// finds what a crash leaves. A node must never set it.
	TestOnlyNoOrphanRemoval bool
}

// Controller is the provisioner runnable: build it with New, then pass Run
// to the supervisor. Run builds its queues, handlers and StorageClass
// informer afresh, so a restart by the supervisor starts from fresh
// queues; its claim and PV informers are the process's shared ones when
// Base.Shared is set (controller.Shared), which outlive the restart and
// stay current through their watches.
type Controller struct {
	Config
}

// New checks cfg and fills in its defaults, so a wiring mistake fails when
// the node starts rather than as a runnable the supervisor restarts forever.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Complete("provisioner"); err != nil {
		return nil, err
	}
	if cfg.Volumes == nil {
		return nil, errors.New("creating provisioner: no volume manager")
	}
	if cfg.Snapshots == nil {
		return nil, errors.New("creating provisioner: no snapshot API client")
	}
	cfg.ClaimWorkers = controller.OrDefault(cfg.ClaimWorkers, DefaultClaimWorkers)
	cfg.VolumeWorkers = controller.OrDefault(cfg.VolumeWorkers, DefaultVolumeWorkers)
	cfg.OrphanGracePeriod = controller.OrDefault(cfg.OrphanGracePeriod, DefaultOrphanGracePeriod)
	cfg.OrphanRetention = controller.OrDefault(cfg.OrphanRetention, DefaultOrphanRetention)
	return &Controller{Config: cfg}, nil
}
