// Package snapshotapi is how Plinth's processes reach the snapshot API
// (snapshot.storage.k8s.io): a client built from the process's own client
// configuration. The names Plinth reads of the API are package
// ownership's (LabelSnapshotManagedBy).
package snapshotapi

import (
	"fmt"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"k8s.io/client-go/rest"
)

// NewClient builds a client of the snapshot API from cfg, with its rate
// limits and identity. The snapshot resources are CustomResources, which
// the API server serves as JSON only: cfg's protobuf content type, if
// any, is replaced.
func NewClient(cfg *rest.Config) (snapclient.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.ContentType = "application/json"
	c.AcceptContentTypes = "application/json"
	client, err := snapclient.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("building the snapshot API client: %w", err)
	}
	return client, nil
}
