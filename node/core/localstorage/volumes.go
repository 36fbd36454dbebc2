package localstorage

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// blockSuffix ends the names of block volume images. Volume IDs cannot
// contain ".", so "<id>.img" can never be a filesystem volume's name.
const blockSuffix = ".img"

// VolumesDirectory is data/volumes/: one entry per volume, named by its ID.
type VolumesDirectory struct {
	Directory
}

// FilesystemVolume is the directory of a filesystem volume,
// volumes/<id>/. Its mode and quota are the volume code's business, so
// MkdirAll is not the way to create it; use os.Mkdir on FullPath.
type FilesystemVolume struct {
	Directory
	id string
}

// ID is the volume's ID.
func (v *FilesystemVolume) ID() string { return v.id }

// BlockVolume is the image file of a block volume, volumes/<id>.img.
type BlockVolume struct {
	File
	id string
}

// ID is the volume's ID.
func (v *BlockVolume) ID() string { return v.id }

// Filesystem returns the path of the filesystem volume id. It checks id with
// ValidateVolumeID and nothing else: whether the volume exists is for the
// caller to find out.
func (v *VolumesDirectory) Filesystem(id string) (FilesystemVolume, error) {
	if err := ValidateVolumeID(id); err != nil {
		return FilesystemVolume{}, err
	}
	return FilesystemVolume{
		Directory: Directory{path: filepath.Join(v.FullPath(), id), mode: 0},
		id:        id,
	}, nil
}

// Block returns the path of the block volume id's image, after checking id
// with ValidateVolumeID.
func (v *VolumesDirectory) Block(id string) (BlockVolume, error) {
	if err := ValidateVolumeID(id); err != nil {
		return BlockVolume{}, err
	}
	return BlockVolume{
		File: File{path: filepath.Join(v.FullPath(), id+blockSuffix), mode: 0o600},
		id:   id,
	}, nil
}

// VolumeKind says what a volumes/ entry is.
type VolumeKind int

const (
	// VolumeUnknown is an entry that is no volume of ours: a wrong name, a
	// symlink, a leftover temporary file. Listing reports these so the
	// startup reconciliation can report them; it must not guess.
	VolumeUnknown VolumeKind = iota
	// VolumeFilesystem is a directory named by a valid volume ID.
	VolumeFilesystem
	// VolumeBlock is a regular file named "<valid volume ID>.img".
	VolumeBlock
)

func (k VolumeKind) String() string {
	switch k {
	case VolumeFilesystem:
		return "filesystem"
	case VolumeBlock:
		return "block"
	default:
		return "unknown"
	}
}

// VolumeEntry is one entry of volumes/.
type VolumeEntry struct {
	// Name is the entry's file name in volumes/.
	Name string
	// ID is the volume ID, "" for VolumeUnknown.
	ID   string
	Kind VolumeKind
	// Reason says why an entry is VolumeUnknown.
	Reason string
}

// List returns every entry of volumes/, sorted by name, classified without
// following symlinks. The same ID may appear twice (a directory and an
// image); deciding what that means is the caller's job.
func (v *VolumesDirectory) List() ([]VolumeEntry, error) {
	des, err := os.ReadDir(v.FullPath())
	if err != nil {
		return nil, fmt.Errorf("listing volumes in %s: %w", v.FullPath(), err)
	}
	entries := make([]VolumeEntry, 0, len(des))
	for _, de := range des {
		entries = append(entries, classifyVolume(de.Name(), de.Type()))
	}
	return entries, nil
}

func classifyVolume(name string, typ fs.FileMode) VolumeEntry {
	e := VolumeEntry{Name: name, Kind: VolumeUnknown}
	id, isBlock := strings.CutSuffix(name, blockSuffix)
	if err := ValidateVolumeID(id); err != nil {
		e.Reason = err.Error()
		return e
	}
	switch {
	case isBlock && typ.IsRegular():
		e.ID, e.Kind = id, VolumeBlock
	case !isBlock && typ.IsDir():
		e.ID, e.Kind = id, VolumeFilesystem
	case isBlock:
		e.Reason = fmt.Sprintf("block image name but a %s, not a regular file", describeType(typ))
	default:
		e.Reason = fmt.Sprintf("volume ID name but a %s, not a directory", describeType(typ))
	}
	return e
}

func describeType(typ fs.FileMode) string {
	switch {
	case typ&fs.ModeSymlink != 0:
		return "symlink"
	case typ.IsDir():
		return "directory"
	case typ.IsRegular():
		return "regular file"
	default:
		return "special file (" + typ.String() + ")"
	}
}
