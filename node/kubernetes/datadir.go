package kubernetes

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/pkg/logtree"
)

const (
	// ReasonDataDirectoryUnused is the Warning Event on the Node of a node
	// whose volumes exist in the cluster while its data directory was
	// never used (waitForDataDirectory).
	ReasonDataDirectoryUnused = "DataDirectoryUnused"
	// dataCheckInterval is how often a refused start looks again.
	dataCheckInterval = 10 * time.Second
	// dataCheckNames bounds the PVs a refusal lists.
	dataCheckNames = 5
)

// waitForDataDirectory keeps the controllers from starting on a data
// directory that cannot hold this node's volumes: one in which no volume
// was ever made (volume.Manager.DataID is empty) while PVs of this node
// exist. That is a data disk that was not mounted (the directory on the
// root filesystem below the mount point), or one replaced by an empty
// disk. The provisioner would make new volumes there, which the disk's
// mount later hides, and the orphan sweep and node removal would act on
// what they see. The node says so in a Warning Event on its Node and in
// its log, and looks again every dataCheckInterval: once the PVs are
// gone (an operator who knows their data is lost deletes them), it goes
// on. A directory that must be remounted needs plinth-node restarted.
func waitForDataDirectory(ctx context.Context, base controller.Base, vols *volume.Manager, log logtree.LeveledLogger) error {
	if vols.DataID() != "" {
		return nil
	}
	var recorder record.EventRecorder
	for {
		pvs, err := nodeVolumes(ctx, base)
		if err != nil {
			return err
		}
		if len(pvs) == 0 {
			if recorder != nil {
				log.Infof("this node's PVs are gone: starting on the unused data directory %s", vols.Data.FullPath())
			}
			return nil
		}
		if recorder == nil {
			var stop func()
			recorder, stop = controller.NewRecorder(ctx, base.EventClient, base.Driver, base.NodeName)
			defer stop()
			reportUnusedDataDirectory(recorder, base, vols, pvs, log)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(dataCheckInterval):
		}
	}
}

// nodeVolumes lists up to dataCheckNames PVs of Plinth's driver labelled
// as this node's.
func nodeVolumes(ctx context.Context, base controller.Base) ([]string, error) {
	sel := labels.Set{ownership.LabelNode: ownership.NodeLabelValue(base.NodeName)}.String()
	list, err := base.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 100})
	if err != nil {
		return nil, fmt.Errorf("listing this node's PVs, to check its data directory: %w", err)
	}
	var names []string
	for _, pv := range list.Items {
		if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == base.Driver && len(names) < dataCheckNames {
			names = append(names, pv.Name)
		}
	}
	return names, nil
}

// reportUnusedDataDirectory says, once per start, why the controllers wait.
func reportUnusedDataDirectory(recorder record.EventRecorder, base controller.Base, vols *volume.Manager, pvs []string, log logtree.LeveledLogger) {
	msg := fmt.Sprintf("This node has volumes of %s (PVs %s), but its data directory %s holds no volume and was never used: "+
		"it is not the disk they are on (is the data disk mounted?). Plinth storage makes and deletes no volume here until "+
		"plinth-node is restarted on the right data directory, or, if their data is lost, the PVs are deleted.",
		base.Driver, strings.Join(pvs, ", "), vols.Data.FullPath())
	log.Warning(msg)
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: base.NodeName, UID: types.UID(base.NodeName)}
	recorder.Event(ref, corev1.EventTypeWarning, ReasonDataDirectoryUnused, msg)
}
