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
//     or for a volume that no PV and no claim refers to.
package provisioner

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"source.plinth.dev/node/kubernetes/volume"
	"source.plinth.dev/pkg/logtree"
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
)

// Defaults for the Controller's optional fields.
const (
	DefaultClaimWorkers      = 16
	DefaultVolumeWorkers     = 4
	DefaultOrphanGracePeriod = 10 * time.Minute
	DefaultResync            = 10 * time.Minute
	defaultRetryBase         = 250 * time.Millisecond
	defaultRetryMax          = 5 * time.Minute
)

// Volumes is the part of the volume manager (*volume.Manager) the
// provisioner uses. Create and Delete are idempotent and resumable after a
// crash at any point; that is what makes the controller's retries safe.
type Volumes interface {
	Create(ctx context.Context, id string, mode volume.Mode, bytes int64) (volume.Info, error)
	Delete(ctx context.Context, id string) error
	List(ctx context.Context) ([]volume.Entry, error)
	// SetReclaimPolicy and ReclaimPolicy keep the reclaim policy of a
	// volume's PV on the node, so the orphan reconciler still knows it
	// after the PV is gone (an administrator deleted a Retain PV).
	SetReclaimPolicy(ctx context.Context, id string, p volume.ReclaimPolicy) error
	ReclaimPolicy(ctx context.Context, id string) (volume.ReclaimPolicy, error)
	// CapacityEnforced is false when filesystem volumes get no quota (the
	// operator allowed that, or Create refuses them).
	CapacityEnforced() bool
}

// permanent reports whether a volume error cannot go away by retrying
// (invalid request, or a volume of that ID with other parameters).
func permanent(err error) bool {
	return errors.Is(err, volume.ErrInvalid) || errors.Is(err, volume.ErrExists)
}

// Controller is the provisioner runnable. Fill in the fields, then pass Run
// to the supervisor. Run builds all informers, queues and caches afresh, so a
// restart by the supervisor starts from a clean slate.
type Controller struct {
	// Client is used for informers and all writes.
	Client kubernetes.Interface
	// EventClient sends Events. It should have its own rate limiter so that
	// Events never take request budget from provisioning. Defaults to Client.
	EventClient kubernetes.Interface
	// Driver is the provisioner and CSI driver name.
	Driver string
	// NodeName is this node's Node object name.
	NodeName string
	// Volumes creates and deletes volumes on this node's data directory.
	Volumes Volumes

	// ClaimWorkers and VolumeWorkers are the number of concurrent
	// provisioning and deletion workers; defaults apply when zero.
	ClaimWorkers, VolumeWorkers int
	// OrphanGracePeriod is how long a volume must have had no PV and no claim
	// before it is removed. It covers the lag of the informers and the time
	// between creating a volume and creating its PV.
	OrphanGracePeriod time.Duration
	// Resync is the informer resync period.
	Resync time.Duration
	// RetryBase and RetryMax bound the per-item exponential retry backoff.
	RetryBase, RetryMax time.Duration
	// Clock is for tests; defaults to the real clock.
	Clock clock.WithTicker
	// Logger overrides the logger taken from the supervisor (for use outside
	// a supervision tree, e.g. benchmarks).
	Logger logtree.LeveledLogger
}

func (c *Controller) validate() error {
	switch {
	case c.Client == nil:
		return errors.New("no Kubernetes client")
	case c.Driver == "":
		return errors.New("no driver name")
	case c.NodeName == "":
		return errors.New("no node name")
	case c.Volumes == nil:
		return errors.New("no volume manager")
	}
	return nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// keyLocks serialises work on one volume ID between the claim workers and the
// orphan reconciler (the only two paths that can act on the same ID
// concurrently). Striped, so it needs no cleanup.
type keyLocks [64]sync.Mutex

func (l *keyLocks) lock(id string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	m := &l[h.Sum32()%uint32(len(l))]
	m.Lock()
	return m.Unlock
}

// describeClaim is how a claim is named in logs and audit lines.
func describeClaim(pvc *corev1.PersistentVolumeClaim) string {
	return fmt.Sprintf("%s/%s (uid %s)", pvc.Namespace, pvc.Name, pvc.UID)
}
