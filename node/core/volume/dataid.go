package volume

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// The data ID marks a data directory on which volumes were made. A node
// whose data disk was not mounted at boot sees an empty directory on its
// root filesystem instead; without a mark it could not tell that from a
// new node, and would make new volumes there, which the disk's later mount
// hides (and the orphan sweep of a node that finds its PVs' volumes gone
// would be misled as well). With it, a directory that holds no volume and
// no mark, on a node whose volumes exist in the cluster, is known not to
// be the data disk (node/kubernetes checks this at start).
//
// The mark is written before the first volume is made, and adopted at
// start by a data directory that holds volumes from before the mark
// existed. It is a random ID, so that logs and messages can name the
// filesystem a node uses.

// DataID returns the ID of the data directory, or "" when no volume was
// ever made in it.
func (m *Manager) DataID() string {
	m.dataIDMu.Lock()
	defer m.dataIDMu.Unlock()
	return m.dataID
}

// loadDataID reads the mark, and writes one when the volumes directory
// holds anything already (volumes made before marks existed, or a crash
// leftover of one).
func (m *Manager) loadDataID() error {
	data, err := m.Data.State.DataID.Read()
	switch {
	case err == nil:
		id := strings.TrimSpace(string(data))
		if id == "" {
			return fmt.Errorf("reading the data ID: %s is empty", m.Data.State.DataID.FullPath())
		}
		m.dataID = id
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("reading the data ID: %w", err)
	}
	entries, err := m.Data.Volumes.List()
	if err != nil {
		return fmt.Errorf("reading the data ID: %w", err)
	}
	if len(entries) == 0 {
		return nil
	}
	return m.markUsed()
}

// markUsed writes the mark unless there is one, durably: a volume is made
// only on a data directory that says so after a power loss.
func (m *Manager) markUsed() error {
	m.dataIDMu.Lock()
	defer m.dataIDMu.Unlock()
	if m.dataID != "" {
		return nil
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("making the data ID: %w", err)
	}
	id := hex.EncodeToString(b)
	if err := m.Data.State.DataID.WriteAtomic([]byte(id+"\n"), m.Data.State.DataID.Mode()); err != nil {
		return fmt.Errorf("writing the data ID: %w", err)
	}
	m.dataID = id
	return nil
}
