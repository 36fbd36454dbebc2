// Package snapshots makes and deletes the snapshots of this node's volumes
// that VolumeSnapshotContents ask for: what the csi-snapshotter sidecar of
// kubernetes-csi/external-snapshotter does beside a CSI driver's
// controller, done by the node itself, because a node-local volume can be
// copied only where it lives.
//
// The snapshot-controller (run with distributed snapshotting) labels each
// content with the node of its source volume
// (ownership.LabelSnapshotManagedBy=<node name>); the node watches only
// the contents of driver storage.plinth.dev with its own label, selected
// on the API server, so what it holds does not grow with the cluster, and
// the admission policies let it write no other node's
// (clusterobjects.AdmissionPolicies). For each one it speaks the sidecar's
// part of the snapshot protocol (plan.go):
//
//   - a dynamic content (spec.source.volumeHandle) is a request for a new
//     snapshot: the node reads its VolumeSnapshotClass's parameters
//     (class.go), marks it being created (AnnBeingCreated), has the
//     volume engine copy the volume into snapshot "snapshot-<UID of the
//     VolumeSnapshot>" (the name the sidecar would pass to CreateSnapshot,
//     so the snapshot handle names the same snapshot whoever asks), records
//     snapshotHandle, readyToUse, restoreSize and creationTime in the
//     content's status, and takes the mark off;
//   - a pre-provisioned content (spec.source.snapshotHandle) names a
//     snapshot that must already be on the node: the node checks that the
//     engine has it and records its status;
//   - a content being deleted, once the snapshot-controller says its
//     VolumeSnapshot is (AnnBeingDeleted), loses its snapshot if its
//     deletionPolicy is Delete (Retain keeps it) and then its finalizer
//     (FinalizerBound), so that the snapshot-controller can finish.
//
// What cannot be done (the source volume is not on this node, the data
// filesystem makes no copy-on-write copies, there is no room) is written
// to status.error, where `kubectl describe volumesnapshot` shows it, and
// said in an Event on the content; the content is retried with backoff.
// Nothing is deleted that the content's status does not name as the
// snapshot this node made for it.
//
// Crash safety is the engine's (a snapshot is reported only once whole,
// and CreateSnapshot and DeleteSnapshot are idempotent) and the order of
// the steps: the status is written only after the snapshot exists, and the
// finalizer is removed only after the snapshot is gone, so a node killed
// at any point redoes at most one idempotent step.
package snapshots

import (
	"context"
	"errors"
	"time"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/controller"
)

// The snapshot protocol's names, as external-snapshotter spells them (its
// pkg/utils). They are the API between the snapshot-controller and the
// driver's side, so they never change.
const (
	// FinalizerBound is the snapshot-controller's finalizer on a content
	// bound to a VolumeSnapshot; the driver's side removes it once it
	// has deleted (or, by policy, kept) the snapshot.
	FinalizerBound = "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
	// AnnBeingDeleted is the snapshot-controller's word that the
	// content's VolumeSnapshot is being deleted: only then may the
	// driver's side delete the snapshot of a deleted content.
	AnnBeingDeleted = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted"
	// AnnBeingCreated is the driver's side's mark while it makes a
	// snapshot: the snapshot-controller does not let the content go
	// while it is there, so that a snapshot being made is never leaked.
	AnnBeingCreated = "snapshot.storage.kubernetes.io/volumesnapshot-being-created"
	// snapshotPrefix + the VolumeSnapshot's UID is the snapshot's name,
	// and its handle: the sidecar's default --snapshot-name-prefix.
	snapshotPrefix = "snapshot-"
)

// Event reasons: the sidecar's, so that alerts written for it keep
// working. Part of the user interface, never changed once released.
const (
	ReasonCreationFailed = "SnapshotCreationFailed"
	ReasonCheckFailed    = "SnapshotContentCheckandUpdateFailed"
	ReasonDeleteError    = "SnapshotDeleteError"
)

// DefaultWorkers is the default of Config.Workers.
const DefaultWorkers = 4

// DefaultAPIPoll is the default of Config.APIPoll: how often a node looks
// again for a snapshot API that its cluster does not serve. The CRDs are
// installed once, by hand or by an installer; a minute's wait after that
// costs nobody anything, and one list a minute costs the API server
// nothing.
const DefaultAPIPoll = time.Minute

// Volumes is the part of the volume engine (*volume.Manager) the
// controller uses. CreateSnapshot and DeleteSnapshot are idempotent and
// crash-safe; a snapshot that is not whole is never returned.
type Volumes interface {
	CreateSnapshot(ctx context.Context, volumeID, snapshotID string, opts ...volume.CreateOption) (volume.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
	GetSnapshot(ctx context.Context, id string) (volume.Snapshot, error)
}

// Config is what a Controller needs: the fields every controller has
// (Client, Driver and NodeName required), the snapshot API's client and
// the volume engine.
type Config struct {
	controller.Base
	// Snapshots is the client of the snapshot.storage.k8s.io API.
	Snapshots snapclient.Interface
	// Volumes makes and deletes the snapshots on this node's data
	// directory.
	Volumes Volumes
	// Workers is the number of contents worked on concurrently.
	Workers int
	// APIPoll is how often a node whose cluster does not serve the
	// snapshot API looks for it again (zero: DefaultAPIPoll).
	APIPoll time.Duration
}

// Controller is the snapshot runnable: build it with New, then pass Run
// to the supervisor. Run builds its informer, queue and handlers afresh,
// so a restart by the supervisor starts from a fresh queue.
type Controller struct {
	Config
}

// New checks cfg and fills in its defaults, so a wiring mistake fails when
// the node starts rather than as a runnable the supervisor restarts
// forever.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Complete("snapshot controller"); err != nil {
		return nil, err
	}
	if cfg.Snapshots == nil {
		return nil, errors.New("creating snapshot controller: no snapshot API client")
	}
	if cfg.Volumes == nil {
		return nil, errors.New("creating snapshot controller: no volume manager")
	}
	cfg.Workers = controller.OrDefault(cfg.Workers, DefaultWorkers)
	cfg.APIPoll = controller.OrDefault(cfg.APIPoll, DefaultAPIPoll)
	return &Controller{Config: cfg}, nil
}
