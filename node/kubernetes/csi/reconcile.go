package csi

import (
	"context"

	"source.plinth.dev/pkg/loop"
)

// reconcile brings the node in line with the publication records at start.
// Records of an earlier boot describe mounts and loop devices that no
// longer exist; their targets are cleaned (a device node there could name
// a device number since given to another volume) and the records dropped,
// so the kubelet's next publish starts fresh. Records of this boot are
// verified and repaired. Finally, loop devices over this node's images
// that no record accounts for (a crash between attaching and recording)
// are removed. Problems are logged; none stops the plugin.
func (s *Server) reconcile(ctx context.Context) {
	for _, p := range s.store.all() {
		func() {
			unlock := s.locks.Lock(volumeKey(p.VolumeID), targetKey(p.TargetPath))
			defer unlock()
			if p.BootID != s.boot {
				if err := removeTarget(p.TargetPath); err != nil {
					s.log.Warningf("cleaning publication of %s at %s from an earlier boot: %v", p.VolumeID, p.TargetPath, err)
				}
				if err := s.store.remove(p.TargetPath); err != nil {
					s.log.Warningf("%v", err)
				}
				s.log.Infof("dropped publication of %s at %s from an earlier boot", p.VolumeID, p.TargetPath)
				return
			}
			_, source, err := s.cfg.Volumes.Locate(ctx, p.VolumeID)
			if err != nil {
				s.log.Warningf("publication of %s at %s: the volume is gone (%v); leaving it for the kubelet to unpublish", p.VolumeID, p.TargetPath, err)
				return
			}
			if err := s.ensure(ctx, p, source); err != nil {
				s.log.Warningf("re-establishing publication of %s at %s: %v", p.VolumeID, p.TargetPath, err)
			}
		}()
	}
	s.holds.releaseUnless(func(target string) bool { return s.store.get(target) != nil })
	s.removeLeakedLoops()
}

// removeLeakedLoops removes loop devices bound to a file in the volumes
// directory that no publication record claims.
func (s *Server) removeLeakedLoops() {
	claimed := make(map[int]bool)
	for _, p := range s.store.all() {
		if p.Loop != nil {
			claimed[p.Loop.Number] = true
		}
	}
	// Devices attached by an earlier incarnation in another mount
	// namespace (a restarted container) are found too (loop.In).
	bindings, err := loop.In(s.cfg.Volumes.Data.Volumes.FullPath())
	if err != nil {
		s.log.Warningf("looking for leaked loop devices: %v", err)
		return
	}
	for _, b := range bindings {
		// A leaked device over a deleted image is leaked all the same.
		if claimed[b.Number] {
			continue
		}
		d, err := loop.Open(b.Path())
		if err != nil {
			continue
		}
		if err := d.Detach(); err != nil {
			s.log.Warningf("removing leaked loop device %s over %s: %v", d.Path(), b.Backing, err)
			continue
		}
		s.log.Infof("removed leaked loop device %s over %s", b.Path(), b.Backing)
	}
}

// published reports the targets at which volume id is published.
func (s *Server) published(id string) []string {
	var out []string
	for _, p := range s.store.forVolume(id) {
		out = append(out, p.TargetPath)
	}
	return out
}
