package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/logtree"
)

const (
	// BackfillInterval is how often KeepBackfilled looks for claims
	// without their node label, and PVs of long-named nodes without their
	// node's name. Only objects written by an earlier version can lack
	// them (or, for claims, while the claim-labels webhook was not
	// registered: a registration deleted by hand), so a rare look is
	// enough; the server's start always looks at once.
	BackfillInterval = 10 * time.Minute
	// backfillPage bounds one list of claims, PVs or Nodes, so that a
	// cluster of any size is read in pieces the API server serves
	// cheaply.
	backfillPage = 500
)

// KeepBackfilled runs LabelClaims and AnnotateVolumes at once and every
// interval until ctx ends, logging what they changed and what failed.
func KeepBackfilled(ctx context.Context, client kubernetes.Interface, log logtree.LeveledLogger, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := LabelClaims(ctx, client)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warningf("labelling claims written without their node label (again in %s): %v", interval, err)
		case n > 0:
			log.Infof("labelled %d claims written without their node label", n)
		}
		n, err = AnnotateVolumes(ctx, client)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warningf("naming the nodes of PVs written without their node's name (again in %s): %v", interval, err)
		case n > 0:
			log.Infof("named the node of %d PVs written without their node's name", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// LabelClaims gives every claim whose node label (ownership.LabelNode)
// is not what its annotations say (ownership.ClaimLabel) the right one,
// and returns how many it changed. Each patch is conditional on the
// version listed: a claim written since went through the claim-labels
// webhook, which labelled it.
func LabelClaims(ctx context.Context, client kubernetes.Interface) (int, error) {
	claims := client.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll)
	labelled := 0
	opts := metav1.ListOptions{Limit: backfillPage}
	for {
		page, err := claims.List(ctx, opts)
		if err != nil {
			return labelled, fmt.Errorf("listing claims: %w", err)
		}
		for i := range page.Items {
			c := &page.Items[i]
			want, wantOK := ownership.ClaimLabel(c, names.DriverName)
			if have, haveOK := c.Labels[ownership.LabelNode]; have == want && haveOK == wantOK {
				continue
			}
			var value any // a JSON null removes the label
			if wantOK {
				value = want
			}
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
				"resourceVersion": c.ResourceVersion,
				"labels":          map[string]any{ownership.LabelNode: value},
			}})
			if err != nil {
				return labelled, fmt.Errorf("encoding the label of claim %s: %w", ownership.DescribeClaim(c), err)
			}
			_, err = client.CoreV1().PersistentVolumeClaims(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			switch {
			case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
				continue
			case err != nil:
				return labelled, fmt.Errorf("labelling claim %s: %w", ownership.DescribeClaim(c), err)
			}
			labelled++
		}
		if page.Continue == "" {
			return labelled, nil
		}
		opts.Continue = page.Continue
	}
}

// AnnotateVolumes gives each PV of Plinth's driver whose node label is a
// hash (ownership.NodeLabelValue of a name longer than a label value) and
// that lacks its node's full name (ownership.AnnNodeName) that name, and
// returns how many it changed. Plinth before the annotation wrote none,
// and the volumes policy lets a long-named node change only the PVs that
// name it in full (clusterobjects.AdmissionPolicies), so until then its
// node may not update or delete them. The name is the Node's whose name
// hashes to the label; a PV whose label is no Node's hash (its node is
// gone) is left alone, for node removal, which knows the name from the
// node's CSINode. Each patch is conditional on the version listed. A
// cluster without long-named Nodes costs one list of the Nodes.
func AnnotateVolumes(ctx context.Context, client kubernetes.Interface) (int, error) {
	byHash, err := longNodeNames(ctx, client)
	if err != nil || len(byHash) == 0 {
		return 0, err
	}
	pvs := client.CoreV1().PersistentVolumes()
	annotated := 0
	opts := metav1.ListOptions{LabelSelector: ownership.LabelNode, Limit: backfillPage}
	for {
		page, err := pvs.List(ctx, opts)
		if err != nil {
			return annotated, fmt.Errorf("listing PVs: %w", err)
		}
		for i := range page.Items {
			pv := &page.Items[i]
			node, ok := byHash[pv.Labels[ownership.LabelNode]]
			if _, named := pv.Annotations[ownership.AnnNodeName]; !ok || named || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != names.DriverName {
				continue
			}
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
				"resourceVersion": pv.ResourceVersion,
				"annotations":     map[string]any{ownership.AnnNodeName: node},
			}})
			if err != nil {
				return annotated, fmt.Errorf("encoding the node name of PV %s: %w", pv.Name, err)
			}
			_, err = pvs.Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			switch {
			case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
				continue
			case err != nil:
				return annotated, fmt.Errorf("naming node %s on PV %s: %w", node, pv.Name, err)
			}
			annotated++
		}
		if page.Continue == "" {
			return annotated, nil
		}
		opts.Continue = page.Continue
	}
}

// longNodeNames maps the node label of each Node whose name is not its
// label (a hash) to the name.
func longNodeNames(ctx context.Context, client kubernetes.Interface) (map[string]string, error) {
	byHash := map[string]string{}
	opts := metav1.ListOptions{Limit: backfillPage}
	for {
		page, err := client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing Nodes: %w", err)
		}
		for _, n := range page.Items {
			if label := ownership.NodeLabelValue(n.Name); label != n.Name {
				byHash[label] = n.Name
			}
		}
		if page.Continue == "" {
			return byHash, nil
		}
		opts.Continue = page.Continue
	}
}
