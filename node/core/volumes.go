package core

import (
	"context"
	"fmt"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// volumesRunnable opens the node's one volume engine over the prepared data
// directory dd, settles what a crash interrupted (half-made or half-deleted
// volumes) before any service looks at the volumes directory, and hands the
// engine to the root. It says once, loudly if need be, whether filesystem
// volumes will have their size enforced: the engine's rule
// (volume.Manager.UnenforcedCapacity) is the one that decides.
func volumesRunnable(cfg Config, dd *DataDir) step[*volume.Manager] {
	return func(ctx context.Context) (*volume.Manager, error) {
		log := supervisor.Logger(ctx)
		vols, err := volume.New(volume.Config{
			Data:            dd.Tree(),
			QuotaError:      dd.QuotaProbeError(),
			AllowUnenforced: cfg.AllowUnenforcedCapacity,
			Share:           cfg.NodeShare,
		})
		if err != nil {
			return nil, err
		}
		recs, err := vols.Recover(ctx)
		for _, r := range recs {
			if r.Err != nil {
				log.Warningf("recovering volume %s: %s failed: %v", r.ID, r.Action, r.Err)
			} else {
				log.Infof("recovered volume %s: %s", r.ID, r.Action)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("recovering volumes: %w", err)
		}
		logCapacityRule(log, vols)
		if err := vols.CopyOnWriteError(); err != nil {
			log.Warningf("snapshots and clones will be refused: %v; volumes work as always. They need the data filesystem to be XFS made with reflink=1 (mkfs.xfs's default since xfsprogs 5.1).", err)
		}
		// Before any service starts: the kubelet and containerd write
		// into the share from their first file.
		share, err := vols.SetUpShare(ctx)
		if err != nil {
			return nil, err
		}
		logShare(log, share)
		return vols, nil
	}
}

// logShare says in one line what the node share is on this node, and
// warns of what it left out.
func logShare(log logtree.LeveledLogger, s volume.ShareSetup) {
	r := s.Restored
	if s.Active {
		log.Infof("node share: %s under project %d, reserve %d bytes, limit %d bytes; relabelled %d of %d entries (%d bytes), %d mount points left alone",
			strings.Join(s.Dirs, ", "), volume.ShareProjectID, s.Reserve, s.Limit, r.Strays, r.Checked, r.StrayBytes, r.Mounts)
	} else {
		log.Infof("node share: none (%v); the node's other writers on the data filesystem can take room promised to filesystem volumes", s.Reason)
	}
	if len(s.Elsewhere) > 0 {
		log.Warningf("node share: %s left out: not on the data filesystem", strings.Join(s.Elsewhere, ", "))
	}
	if r.Failed > 0 {
		log.Warningf("node share: %d entries could not be relabelled and are not counted in it (the first: %s)", r.Failed, r.FirstFailure)
	}
}

// nodeShareInterval is how often the node share's limit is fitted to what
// volumes are promised, besides the fits of Create, Expand and Delete:
// what changes between them (Plinth's records, holes punched in block
// images) is small, and a fit costs one quota read per filesystem volume.
const nodeShareInterval = 10 * time.Second

// The node share's audit: every shareAuditInterval the share's trees are
// walked (volume.Manager.RestoreShare) at most shareAuditRate entries a
// second, the pace of the volumes' audit, so that a walk of containerd's
// many small files does not crowd out the pods' I/O.
const (
	shareAuditInterval = 10 * time.Minute
	shareAuditRate     = 2000
)

// nodeShareRunnable fits the node share's limit every fitEvery and audits
// its trees every auditEvery, as two children.
func nodeShareRunnable(vols *volume.Manager, fitEvery, auditEvery time.Duration) supervisor.Runnable {
	return func(ctx context.Context) error {
		if err := supervisor.RunGroup(ctx, map[string]supervisor.Runnable{
			"fit":   shareFitRunnable(vols, fitEvery),
			"audit": shareAuditRunnable(vols, auditEvery),
		}); err != nil {
			return err
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
}

// shareFitRunnable fits the share's limit every interval. A failed fit
// leaves the last limit in place; it is logged once until a fit succeeds
// again.
func shareFitRunnable(vols *volume.Manager, interval time.Duration) supervisor.Runnable {
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		t := time.NewTicker(interval)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
			_, err := vols.RefitShare(ctx)
			switch {
			case err != nil && !failing && ctx.Err() == nil:
				log.Warningf("node share: %v", err)
			case err == nil && failing:
				log.Info("node share: its limit fits again")
			}
			failing = err != nil
		}
	}
}

// shareAuditRunnable walks the share's trees every interval and puts
// files moved out of its project back, saying so when it found any.
func shareAuditRunnable(vols *volume.Manager, interval time.Duration) supervisor.Runnable {
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		limiter := rate.NewLimiter(shareAuditRate, shareAuditRate/10)
		pace := func(ctx context.Context) error { return limiter.Wait(ctx) }
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
			r, err := vols.RestoreShare(ctx, pace)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				log.Warningf("node share: audit: %v", err)
			}
			if r.Strays > 0 {
				log.Warningf("node share: put %d entries holding %d bytes back into the share's project (the first: %s): a pod moved them out to write past the share's limit",
					r.Strays, r.StrayBytes, r.FirstStray)
			}
		}
	}
}

// logCapacityRule says what the engine does with filesystem volumes when
// the data filesystem cannot enforce their size.
func logCapacityRule(log logtree.LeveledLogger, vols *volume.Manager) {
	reason, allowed := vols.UnenforcedCapacity()
	switch {
	case reason == nil:
		return
	case allowed:
		// Loud on purpose: every filesystem volume of this node can
		// outgrow its size, and whoever reads the log must notice.
		for _, l := range []string{
			"**********************************************************************",
			"CAPACITY OF FILESYSTEM VOLUMES IS NOT ENFORCED on this node.",
			fmt.Sprintf("Reason: %v", reason),
			fmt.Sprintf("Filesystem volumes are provisioned anyway because %s is set:", volume.AllowUnenforcedCapacityFlag),
			"a volume can fill the whole data filesystem. Never run this in production.",
			"**********************************************************************",
		} {
			log.Warning(l)
		}
	default:
		log.Warningf("filesystem volumes will be refused: project quotas are not enforced (%v); block volumes work. Pass %s to accept unenforced capacity.",
			reason, volume.AllowUnenforcedCapacityFlag)
	}
}
