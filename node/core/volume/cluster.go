package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// The cluster ID names the cluster whose objects the volumes on this data
// directory belong to. The volume layer does not know what a cluster is:
// its caller (the provisioner) hands it an opaque ID, records it before it
// makes a volume, and compares it with the cluster it is connected to
// before it takes the absence of an object for a deletion. A node pointed
// at another cluster (a kubeconfig for the wrong one, a cluster rebuilt
// from backups under the same name) sees none of its PVs, and without the
// record it would treat every volume as an orphan.

// ClusterID returns the recorded cluster ID, or "" when none was recorded.
func (m *Manager) ClusterID() (string, error) {
	m.clusterMu.Lock()
	defer m.clusterMu.Unlock()
	return m.readClusterID()
}

func (m *Manager) readClusterID() (string, error) {
	data, err := m.Data.State.ClusterID.Read()
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the cluster ID: %w", err)
	}
	id := strings.TrimSpace(string(data))
	if id == "" {
		return "", fmt.Errorf("reading the cluster ID: %s is empty; remove it, and plinth-node records the cluster it is connected to", m.Data.State.ClusterID.FullPath())
	}
	return id, nil
}

// RecordCluster records id as the cluster of this data directory's volumes
// unless one is recorded already, durably, and returns the recorded one:
// id, or the earlier one, which the caller compares. It never replaces a
// recorded ID; an operator who moves the disk to another cluster on
// purpose removes the file (see docs/operating.md).
func (m *Manager) RecordCluster(id string) (string, error) {
	id = strings.TrimSpace(id)
	if id == "" || strings.ContainsAny(id, "\n\r") {
		return "", fmt.Errorf("recording the cluster ID: %w: %q", ErrInvalid, id)
	}
	m.clusterMu.Lock()
	defer m.clusterMu.Unlock()
	cur, err := m.readClusterID()
	if err != nil || cur != "" {
		return cur, err
	}
	if err := m.durable("cluster-id", m.Data.State.ClusterID.WriteAtomic([]byte(id+"\n"), m.Data.State.ClusterID.Mode())); err != nil {
		return "", fmt.Errorf("recording the cluster ID: %w", err)
	}
	return id, nil
}
