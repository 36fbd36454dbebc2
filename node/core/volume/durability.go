package volume

import (
	"fmt"
	"sync"

	"source.plinth.dev/pkg/fsquota"
)

// Each operation makes its changes durable step by step (fsync of an image,
// of a directory after a rename or removal, syncfs after a quota change)
// and reports success only once they all succeeded. A retry after a failed
// step may find the change already in place, as far as reading the
// filesystem tells: the removed intent record is gone, the rewritten
// record reads back equal, and the retry would report success for a change
// a power loss can still undo. An interrupted Create that comes back that
// way is rolled back by Recover, taking with it a volume its pod has
// written to. So a failed step leaves a debt, and no operation goes on
// until a sync of the whole data filesystem has succeeded after it.
//
// The debt lives in memory: a process that ends owing it forgets it. So
// Recover, the first thing a starting node does with its volumes, syncs
// the whole data filesystem before it reads or changes anything, as if
// every process before it had died owing.

// syncDebt counts the durable steps that failed and how many of them a
// later sync of the whole filesystem covered.
type syncDebt struct {
	mu             sync.Mutex
	failed, synced uint64
}

// durable passes on err, the result of the durable step named step, and
// remembers a failure as a debt. Any error counts, also one that came
// before the sync itself: it costs at most one unneeded syncfs.
func (m *Manager) durable(step string, err error) error {
	if err == nil && m.syncHook != nil {
		err = m.syncHook(step)
	}
	if err != nil {
		m.debt.mu.Lock()
		m.debt.failed++
		m.debt.mu.Unlock()
	}
	return err
}

// settleDebt syncs the data filesystem if a durable step failed since the
// last such sync, and fails if that sync fails: the caller must not report
// anything as done while earlier changes may still be lost. Concurrent
// callers may sync twice; a failure recorded during a sync is not
// covered by it.
func (m *Manager) settleDebt() error {
	m.debt.mu.Lock()
	owed := m.debt.failed
	paid := m.debt.synced
	m.debt.mu.Unlock()
	if owed == paid {
		return nil
	}
	if err := m.syncFilesystem(); err != nil {
		return fmt.Errorf("making earlier changes durable after %d failed syncs: %w", owed-paid, err)
	}
	m.debt.mu.Lock()
	m.debt.synced = max(m.debt.synced, owed)
	m.debt.mu.Unlock()
	return nil
}

// syncFilesystem syncs the whole data filesystem (syncfs).
func (m *Manager) syncFilesystem() error {
	err := fsquota.Sync(m.Data.Volumes.FullPath())
	if err == nil && m.syncHook != nil {
		err = m.syncHook("filesystem")
	}
	return err
}
