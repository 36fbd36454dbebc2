package localstorage

import (
	"fmt"
	"path/filepath"
)

// Root is the whole node tree. On a node booted with plinth-node as PID 1 it
// is placed at "/"; a hosted plinth-node places it at --root.
//
//	<root>/
//	  data/                  DataDirectory: the data partition
//	  ephemeral/             EphemeralDirectory: state that ends with the boot
//	  kubelet/               KubeletDirectory (often re-placed by --kubelet-dir)
type Root struct {
	Directory
	Data      DataDirectory      `dir:"data" mode:"0755"`
	Ephemeral EphemeralDirectory `dir:"ephemeral" mode:"0755"`
	Kubelet   KubeletDirectory   `dir:"kubelet" mode:"0750"`
}

// Place places the whole tree with its root at path.
func (r *Root) Place(path string) error { return Place(r, path) }

// MkdirAll creates the whole declared tree.
func (r *Root) MkdirAll() error { return MkdirAll(r) }

// DataDirectory is the data partition: everything here must survive reboots
// and is what the node's storage is made of.
type DataDirectory struct {
	Directory
	// Volumes holds one entry per volume: a directory for filesystem
	// volumes, "<id>.img" for block volumes. 0700 because only plinth-node
	// and the kubelet (both root) walk it; pods see their volume through a
	// bind mount or a device node, never through this path.
	Volumes VolumesDirectory `dir:"volumes" mode:"0700"`
	// Quarantine holds volumes whose PV and claim vanished (the orphan
	// sweep's finds), in the same layout as Volumes, until a retention
	// period ends or their PV comes back. It is on the data filesystem,
	// so a volume moves in and out by one rename and keeps its quota and
	// project ID; like Volumes it carries no project ID of its own (a
	// rename into a directory of another project fails on XFS).
	Quarantine VolumesDirectory `dir:"quarantine" mode:"0700"`
	// Snapshots holds one directory per snapshot of a volume
	// (SnapshotDirectory): copy-on-write copies of volumes' data, which
	// must be on the same filesystem as the volumes for a copy to share
	// their blocks. 0700 for the same reason as Volumes.
	Snapshots SnapshotsDirectory `dir:"snapshots" mode:"0700"`
	// State is plinth-node's persistent runtime state.
	State StateDirectory `dir:"state" mode:"0700"`
}

// Place places the data subtree at path (csi-serve --data-dir).
func (d *DataDirectory) Place(path string) error { return Place(d, path) }

// MkdirAll creates the data subtree.
func (d *DataDirectory) MkdirAll() error { return MkdirAll(d) }

// StateDirectory is persistent runtime state, written with File.WriteAtomic.
type StateDirectory struct {
	Directory
	// Projects holds the XFS project-ID claims of pkg/fsquota's allocator,
	// one record per ID in use, so IDs survive restarts without scanning
	// every volume.
	Projects Directory `dir:"projects" mode:"0700"`
	// Operations holds intent records of in-flight provisioning and
	// deletion, so an interrupted operation can be finished or undone on
	// the next start.
	Operations Directory `dir:"operations" mode:"0700"`
	// Records holds one small record per volume that outlives any single
	// operation (which reclaim policy its PV had), so the orphan reconciler
	// can tell retained data from a crash leftover after the PV is gone.
	Records Directory `dir:"records" mode:"0700"`
	// DataID names this data filesystem once a volume was made on it
	// (volume.Manager.DataID): a node whose volumes exist in the cluster
	// but whose data directory has no such mark is looking at another
	// disk than the one its volumes are on.
	DataID File `file:"data-id" mode:"0644"`
	// ClusterID names the Kubernetes cluster (its kube-system namespace's
	// UID) whose PVs the volumes here belong to, written with the first
	// volume (volume.Manager.ClusterID): a node pointed at another
	// cluster, which has none of these PVs, must not take their absence
	// for a deletion.
	ClusterID File `file:"cluster-id" mode:"0644"`
}

// EphemeralDirectory is runtime state that is meaningless after a reboot:
// loop devices, mounts and processes do not survive one. On a PID-1 node it
// lives on tmpfs; a hosted node keeps it below --root, and its users must
// therefore still treat its records as hints to verify, never as facts.
type EphemeralDirectory struct {
	Directory
	CSI CSIStateDirectory `dir:"csi" mode:"0700"`
	// Log holds output of supervised child processes that cannot be piped
	// into the logtree (e.g. early crashes before a pipe exists).
	Log Directory `dir:"log" mode:"0750"`
	// Lock is held (flock) by a running plinth-node for this tree, so a
	// second instance on the same root refuses to start.
	Lock File `file:"plinth-node.lock" mode:"0644"`
	// PID records the running plinth-node's process ID, for operators and
	// test launchers.
	PID File `file:"plinth-node.pid" mode:"0644"`
}

// Place places the ephemeral subtree at path.
func (e *EphemeralDirectory) Place(path string) error { return Place(e, path) }

// MkdirAll creates the ephemeral subtree.
func (e *EphemeralDirectory) MkdirAll() error { return MkdirAll(e) }

// CSIStateDirectory is the CSI node plugin's runtime state.
type CSIStateDirectory struct {
	Directory
	// Publications holds one record per published target (which loop
	// device serves which volume at which target path), so the plugin
	// depends on no memory across restarts. Record names come from the
	// plugin (e.g. a hash of the target path) through ChildFile.
	Publications Directory `dir:"publications" mode:"0700"`
}

// KubeletDirectory is the kubelet's root directory (--root-dir of the
// kubelet). Modes match the ones the kubelet itself uses, so MkdirAll
// converging them changes nothing the kubelet relies on.
type KubeletDirectory struct {
	Directory
	Plugins         PluginsDirectory         `dir:"plugins" mode:"0750"`
	PluginsRegistry PluginsRegistryDirectory `dir:"plugins_registry" mode:"0750"`
	// Pods holds the pods' volume mount points: every CSI target path lies
	// below it.
	Pods Directory `dir:"pods" mode:"0750"`
}

// Place places the kubelet subtree at path (--kubelet-dir).
func (k *KubeletDirectory) Place(path string) error { return Place(k, path) }

// MkdirAll creates the kubelet subtree.
func (k *KubeletDirectory) MkdirAll() error { return MkdirAll(k) }

// PluginsDirectory is the kubelet's plugins/ directory, one subdirectory per
// CSI driver.
type PluginsDirectory struct {
	Directory
}

// VolumePlugin returns plugins/kubernetes.io/csi/, the directory of the
// kubelet's own CSI volume plugin, where the kubelet puts the staging and
// publish paths of block volumes (volumeDevices/) and the global mounts of
// staged filesystem volumes. The kubelet creates it; this only names it.
func (p *PluginsDirectory) VolumePlugin() Directory {
	var d Directory
	if err := placeAt(&d, filepath.Join(p.FullPath(), "kubernetes.io", "csi"), 0o750); err != nil {
		panic(fmt.Sprintf("placing the kubelet's CSI volume plugin directory: %v", err))
	}
	return d
}

// PluginDirectory is plugins/<driver>/, the home of one CSI driver's socket.
type PluginDirectory struct {
	Directory
	// CSISocket is where the driver serves CSI; the kubelet learns this
	// path from the registration handshake.
	CSISocket Socket `file:"csi.sock"`
}

// Driver returns the placed plugin directory of the CSI driver name (create
// it with MkdirAll). The name is checked with ValidateDriverName, so the
// driver name constant is kept in one place by its owner and this package
// only knows the kubelet's layout.
func (p *PluginsDirectory) Driver(name string) (PluginDirectory, error) {
	if err := ValidateDriverName(name); err != nil {
		return PluginDirectory{}, err
	}
	var d PluginDirectory
	if err := placeAt(&d, filepath.Join(p.FullPath(), name), 0o750); err != nil {
		return PluginDirectory{}, fmt.Errorf("placing plugin directory of %s: %w", name, err)
	}
	return d, nil
}

// PluginsRegistryDirectory is the kubelet's plugins_registry/ directory,
// where the kubelet's plugin watcher looks for registration sockets.
type PluginsRegistryDirectory struct {
	Directory
}

// Registration returns the registration socket of the CSI driver name,
// "<driver>-reg.sock" (the name the kubelet's plugin watcher expects by
// convention).
func (r *PluginsRegistryDirectory) Registration(driver string) (Socket, error) {
	if err := ValidateDriverName(driver); err != nil {
		return Socket{}, err
	}
	var s Socket
	if err := placeSocket(&s, filepath.Join(r.FullPath(), driver+"-reg.sock")); err != nil {
		return Socket{}, err
	}
	return s, nil
}
