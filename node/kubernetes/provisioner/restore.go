package provisioner

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/datasource"
)

// A claim with a data source is a restore (of a VolumeSnapshot) or a
// clone (of a claim of its namespace and class): its volume is the
// engine's copy-on-write copy of the source (volume.FromSnapshot,
// volume.FromVolume), made on the node that holds the source, where the
// placer puts such a claim (package placement). The node reads the
// source again, from the API server, before it copies: it copies only a
// source on this node, ready, of the claim's mode and no larger than the
// claim; anything else is a Warning Event and nothing made. The engine
// checks mode and size again against its own record (a snapshot's mode
// is the engine's alone), locks the source for the copy (a Delete of it
// waits), and removes a copy a crash interrupted. The PV is an ordinary
// one: what it was copied from is the engine's record (copyXattr), not
// the PV's.

// errSourceElsewhere: the claim was placed on this node, but its source
// is on another; the claim is handed back, and the placer puts it there.
var errSourceElsewhere = errors.New("its data source is on another node")

// resolveSource finds the claim's data source and checks it can be
// copied here, into req. ok is false when the claim is not to be
// provisioned now: the reason was told in an Event, and err, if not nil,
// asks for a retry.
func (r *run) resolveSource(ctx context.Context, key string, pvc *corev1.PersistentVolumeClaim, req *request) (ok bool, err error) {
	src, err := datasource.Resolve(ctx, datasource.Clients{Core: r.Client, Snapshots: r.Snapshots}, r.Driver, pvc)
	switch {
	case err == nil && src == nil:
		return true, nil
	case errors.Is(err, datasource.ErrNotReady):
		r.failClaim(pvc, fmt.Sprintf("Waiting for the claim's data source: %v (will retry).", err))
		return false, err
	case errors.Is(err, datasource.ErrUnusable):
		r.failClaim(pvc, fmt.Sprintf("The claim's data source %v.", err))
		return false, nil
	case err != nil:
		return false, err
	}
	if src.Node != r.NodeName {
		return false, r.handBack(ctx, key, pvc, req, fmt.Errorf("%w: %s is on node %s", errSourceElsewhere, src.Name, src.Node))
	}
	if src.Kind == datasource.Volume && src.Mode != req.mode {
		r.failClaim(pvc, fmt.Sprintf("The claim asks for a %s volume, but its data source %s is a %s volume: a clone has its source's volume mode.", req.mode, src.Name, src.Mode))
		return false, nil
	}
	if src.Bytes > req.bytes {
		r.failClaim(pvc, fmt.Sprintf("The claim asks for %s, less than its data source %s holds (%s): %v; ask for at least %s.",
			req.size.String(), src.Name, resource.NewQuantity(src.Bytes, resource.BinarySI), volume.ErrSmallerThanSource,
			resource.NewQuantity(src.Bytes, resource.BinarySI)))
		return false, nil
	}
	req.source = src
	return true, nil
}

// createOptions are the engine's options for the request's volume: its
// class's, and for a copy what its class gives a copy
// (classparams.Params.CopyOptions) and the option that makes it one.
func (r *request) createOptions() []volume.CreateOption {
	switch {
	case r.source == nil:
		return r.params.CreateOptions(r.volumeMode())
	case r.source.Kind == datasource.Snapshot:
		return append(r.params.CopyOptions(), volume.FromSnapshot(r.source.Handle))
	}
	return append(r.params.CopyOptions(), volume.FromVolume(r.source.Handle))
}

// volumeAttributes are what the request's PV records of its class's
// parameters (classparams.Params.VolumeAttributes): nothing for a copy,
// whose root directory mode is its source's, not the class's.
func (r *request) volumeAttributes() map[string]string {
	if r.source != nil {
		return nil
	}
	return r.params.VolumeAttributes(r.volumeMode())
}

// handsBack reports whether a failure to make the volume is one to hand
// the claim back for: one another node may not have (fitsElsewhere), for
// a claim that may go to another node. A copy can be made only where its
// source is, so its claim stays here and waits (the Event says why).
func (r *request) handsBack(err error) bool {
	return r.source == nil && fitsElsewhere(err)
}
