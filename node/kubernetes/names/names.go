// Package names holds the names that more than one part of Plinth's storage
// must spell identically: the CSI driver (which is also the provisioner name
// and the PVC annotation value), the default StorageClass and the topology
// key. A typo in one copy of such a name fails silently (the kubelet never
// finds the driver, the provisioner never sees a claim), so every user
// imports it from here instead of repeating the literal.
//
// The package imports nothing, so the CSI plugin and the class parameters'
// reader (classparams) can use it as well as the controllers.
package names

const (
	// DriverName is the CSI driver name, the CSIDriver object's name, the
	// provisioner name in StorageClasses and PVC annotations, and the
	// directory/socket name in the kubelet's plugin directories.
	DriverName = "storage.plinth.dev"

	// StorageClassName is the default StorageClass the node creates.
	StorageClassName = "local"

	// TopologyKeyHostname is the node label our PVs' node affinity and the
	// CSI plugin's accessible topology use. Volumes live on one node's
	// data partition, so the hostname is the whole topology.
	TopologyKeyHostname = "kubernetes.io/hostname"

	// ParameterRootDirMode is the StorageClass parameter (and CSI
	// CreateVolume parameter) that sets the mode of a filesystem volume's
	// root directory, in octal ("0770"); the provisioner also records the
	// mode a volume was made with under this key in its PV's volume
	// attributes.
	ParameterRootDirMode = "rootDirMode"

	// ParameterOvercommit is the StorageClass parameter that lets volumes
	// of the class over-commit the room promised to filesystem volumes, as
	// a ratio ("2"; see volume.Overcommit). Without it nothing is
	// over-committed. classparams reads it for the provisioner and for the
	// capacity published for the class.
	ParameterOvercommit = "overcommit"
)
