package snapshots

import (
	"context"
	"errors"
	"fmt"

	crdv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/classparams"
)

// errBadClass marks a content whose VolumeSnapshotClass cannot make a
// snapshot until a user mends it: it does not exist, or it asks for what
// Plinth cannot do. The content says so; it is retried with backoff.
var errBadClass = errors.New("the content's VolumeSnapshotClass cannot make a snapshot")

// snapshotOptions reads the VolumeSnapshotClass a dynamic content names,
// live (one read per snapshot, and a node watches no cluster-wide
// objects), and returns the engine's options for its parameters, as the
// csi-snapshotter passes a class's parameters to CreateSnapshot. A
// content that names no class gets the defaults.
func (r *run) snapshotOptions(ctx context.Context, content *crdv1.VolumeSnapshotContent) ([]volume.CreateOption, error) {
	name := content.Spec.VolumeSnapshotClassName
	if name == nil || *name == "" {
		return nil, nil
	}
	class, err := r.Snapshots.SnapshotV1().VolumeSnapshotClasses().Get(ctx, *name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: VolumeSnapshotClass %s does not exist", errBadClass, *name)
	case err != nil:
		return nil, fmt.Errorf("reading VolumeSnapshotClass %s: %w", *name, err)
	case class.Driver != r.Driver:
		return nil, fmt.Errorf("%w: VolumeSnapshotClass %s is of driver %q, not %q", errBadClass, *name, class.Driver, r.Driver)
	}
	p, err := classparams.ParseSnapshot(class.Parameters)
	if err != nil {
		return nil, fmt.Errorf("%w: VolumeSnapshotClass %s: %w", errBadClass, *name, err)
	}
	return p.SnapshotOptions(), nil
}
