package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"source.plinth.dev/node/core/localstorage"
)

// publication is the persisted record of one published target: which
// volume is served there and, for a block volume, by which loop device.
// The records are the plugin's only memory across restarts; the in-memory
// index is rebuilt from them at start.
type publication struct {
	VolumeID   string `json:"volumeID"`
	TargetPath string `json:"targetPath"`
	// Mode is "filesystem" or "block".
	Mode       string   `json:"mode"`
	ReadOnly   bool     `json:"readOnly"`
	AccessMode int32    `json:"accessMode"`
	MountFlags []string `json:"mountFlags,omitempty"`
	// BootID is the kernel's boot ID when the record was written. Mounts
	// and loop devices end with the boot; a record from another boot
	// describes nothing that still exists.
	BootID string `json:"bootID"`
	// Loop identifies a block volume's loop device: its number and device
	// number, and the image it must be bound to (device and inode, which
	// stay right even if a path is reused). A device found with another
	// backing file is not ours any more: minor numbers are reused.
	Loop *loopRecord `json:"loop,omitempty"`
}

type loopRecord struct {
	Number       int    `json:"number"`
	Rdev         uint64 `json:"rdev"`
	BackingDev   uint64 `json:"backingDev"`
	BackingInode uint64 `json:"backingInode"`
}

// sameRequest reports whether p was published with the same arguments as
// q, which makes a repeated NodePublishVolume a no-op. Mount flags are
// compared by their effect (effectiveFlags), not as written.
func (p *publication) sameRequest(q *publication) bool {
	return p.VolumeID == q.VolumeID && p.TargetPath == q.TargetPath && p.Mode == q.Mode &&
		p.ReadOnly == q.ReadOnly && p.AccessMode == q.AccessMode &&
		slices.Equal(effectiveFlags(p.MountFlags), effectiveFlags(q.MountFlags))
}

// effectiveFlags is a publication's mount flags as a sorted set, without
// the ones every publication gets anyway (nosuid, nodev) and "ro", which
// ReadOnly carries: two requests that differ only in order, repetition or
// those flags make the same mount.
func effectiveFlags(flags []string) []string {
	out := slices.DeleteFunc(slices.Clone(flags), func(f string) bool { return f == "nosuid" || f == "nodev" || f == "ro" })
	slices.Sort(out)
	return slices.Compact(out)
}

// store persists publications in the CSI state directory, one file per
// target, and indexes them in memory. Its methods are safe for concurrent
// use; callers serialise changes per volume and target with their locks.
type store struct {
	dir *localstorage.Directory

	mu       sync.Mutex
	byTarget map[string]*publication
}

// recordName is the file name of a target's record. Target paths contain
// "/" and can be long, so the name is a hash; the record holds the path.
func recordName(target string) string {
	sum := sha256.Sum256([]byte(target))
	return "pub-" + hex.EncodeToString(sum[:16])
}

// load reads every record. Unreadable records are returned as problems,
// not errors: one damaged file must not keep the plugin from serving the
// other volumes.
func (s *store) load() (problems []string, err error) {
	names, err := s.dir.Entries()
	if err != nil {
		return nil, fmt.Errorf("loading publication records: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byTarget = make(map[string]*publication, len(names))
	for _, name := range names {
		f, err := s.dir.ChildFile(name)
		if err != nil {
			continue
		}
		b, err := f.Read()
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		var p publication
		if err := json.Unmarshal(b, &p); err != nil || p.TargetPath == "" || recordName(p.TargetPath) != name {
			problems = append(problems, fmt.Sprintf("publication record %s is unreadable or misnamed (%v); removing it", f.FullPath(), err))
			_ = f.Remove()
			continue
		}
		s.byTarget[p.TargetPath] = &p
	}
	return problems, nil
}

// get returns a copy of the record for target, or nil.
func (s *store) get(target string) *publication {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.byTarget[target]
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// forVolume returns copies of the records of volume id, sorted by target.
func (s *store) forVolume(id string) []*publication {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*publication
	for _, p := range s.byTarget {
		if p.VolumeID == id {
			c := *p
			out = append(out, &c)
		}
	}
	slices.SortFunc(out, func(a, b *publication) int { return strings.Compare(a.TargetPath, b.TargetPath) })
	return out
}

// loopReserved returns a test for the loop numbers the records name: a pod
// may hold the device node of each until its publication is removed, so
// none is given to another volume (see hold.go). The set is taken now.
func (s *store) loopReserved() func(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	taken := make(map[int]bool)
	for _, p := range s.byTarget {
		if p.Loop != nil {
			taken[p.Loop.Number] = true
		}
	}
	return func(n int) bool { return taken[n] }
}

// all returns copies of every record.
func (s *store) all() []*publication {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*publication, 0, len(s.byTarget))
	for _, p := range s.byTarget {
		c := *p
		out = append(out, &c)
	}
	return out
}

// put writes p's record atomically (see below for durability), then
// indexes it.
func (s *store) put(p *publication) error {
	f, err := s.dir.ChildFile(recordName(p.TargetPath))
	if err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encoding publication record: %w", err)
	}
	// No fsync: the records describe mounts and loop devices, which a
	// power loss ends anyway (and the boot ID check then discards the
	// records). Against a crash of the process the rename alone is
	// atomic, and skipping the two fsyncs saves milliseconds per publish
	// on a disk-backed ephemeral directory.
	if err := f.WriteAtomicNoSync(b, 0o600); err != nil {
		return fmt.Errorf("recording publication of %s at %s: %w", p.VolumeID, p.TargetPath, err)
	}
	c := *p
	s.mu.Lock()
	s.byTarget[p.TargetPath] = &c
	s.mu.Unlock()
	return nil
}

// remove deletes target's record.
func (s *store) remove(target string) error {
	f, err := s.dir.ChildFile(recordName(target))
	if err != nil {
		return err
	}
	if err := f.Remove(); err != nil {
		return fmt.Errorf("removing publication record of %s: %w", target, err)
	}
	s.mu.Lock()
	delete(s.byTarget, target)
	s.mu.Unlock()
	return nil
}

// bootID returns the kernel's boot ID, which changes with every boot.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("reading boot ID: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
