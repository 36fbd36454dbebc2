package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/test/launch/host"
)

// LockPath is the host-wide lock every launched cluster holds while it runs.
// Only one cluster can run per host: a kubelet owns the kubepods cgroups,
// /var/lib/kubelet/device-plugins and the node's name.
const LockPath = "/run/plinth-launch.lock"

// BusyError says another cluster holds the host lock.
type BusyError struct {
	PID int
	Dir string
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("a Plinth cluster is already running on this host (launcher pid %d, work directory %s); stop it first (Ctrl-C in its terminal)", e.PID, e.Dir)
}

// lockState is what the lock file records, so that the next launcher can
// clean up after one that died without tearing down.
type lockState struct {
	PID      int           `json:"pid"`
	Dir      string        `json:"dir"`
	Baseline host.Baseline `json:"baseline"`
}

// acquireLock takes the host lock. With wait it polls until the lock is
// free or ctx ends; without, a held lock is a *BusyError at once.
func acquireLock(ctx context.Context, wait bool, logf func(string, ...any)) (*os.File, lockState, error) {
	f, err := os.OpenFile(LockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, lockState{}, fmt.Errorf("opening %s: %w", LockPath, err)
	}
	logged := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, lockState{}, fmt.Errorf("locking %s: %w", LockPath, err)
		}
		prev, _ := readLockState(f)
		busy := &BusyError{PID: prev.PID, Dir: prev.Dir}
		if !wait {
			f.Close()
			return nil, lockState{}, busy
		}
		if !logged {
			logf("waiting: %v", busy)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, lockState{}, fmt.Errorf("waiting for %s: %w", LockPath, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	prev, err := readLockState(f)
	if err != nil {
		f.Close()
		return nil, lockState{}, err
	}
	return f, prev, nil
}

func readLockState(f *os.File) (lockState, error) {
	var s lockState
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return s, fmt.Errorf("reading %s: %w", LockPath, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return s, fmt.Errorf("reading %s: %w", LockPath, err)
	}
	if len(data) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(data, &s); err != nil {
		// A torn write from a crash; nothing to recover from it.
		return lockState{}, nil
	}
	return s, nil
}

// writeLockState records s (an empty state after a clean teardown).
func writeLockState(f *os.File, s *lockState) error {
	var data []byte
	if s != nil {
		var err error
		if data, err = json.Marshal(s); err != nil {
			return fmt.Errorf("encoding lock state: %w", err)
		}
	}
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("writing %s: %w", LockPath, err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("writing %s: %w", LockPath, err)
	}
	return f.Sync()
}
