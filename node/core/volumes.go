package core

import (
	"context"
	"fmt"

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
		return vols, nil
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
