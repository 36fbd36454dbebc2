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
	// BackfillInterval is how often KeepClaimsLabelled looks for claims
	// without their node label. Only claims written while the claim-labels
	// webhook was not registered can lack it (an upgrade from a version
	// without it, or a registration deleted by hand), so a rare look is
	// enough; the server's start always looks at once.
	BackfillInterval = 10 * time.Minute
	// backfillPage bounds one list of claims, so that a cluster of any
	// size is read in pieces the API server serves cheaply.
	backfillPage = 500
)

// KeepClaimsLabelled runs LabelClaims at once and every interval until
// ctx ends, logging what it labelled and what failed.
func KeepClaimsLabelled(ctx context.Context, client kubernetes.Interface, log logtree.LeveledLogger, interval time.Duration) {
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
