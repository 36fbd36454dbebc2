package fsquota

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"source.plinth.dev/pkg/dirsync"
)

// ErrIDInUse is wrapped by Claim when the ID belongs to another owner.
var ErrIDInUse = errors.New("project ID in use")

// ErrIDsExhausted is wrapped by Allocate when every ID in range is taken.
var ErrIDsExhausted = errors.New("no free project ID")

// IDAllocator hands out project IDs so that no two owners ever hold the
// same one, across goroutines, processes and restarts.
//
// Each allocated ID is a symlink <dir>/<id> whose target is the owner's
// name. symlink(2) creates the name atomically and fails with EEXIST when
// it exists, so the filesystem decides every race: scanning for a free ID
// and then using it, as peers do, lets two provisions pick the same ID.
// The claim is the directory entry itself, complete at birth (no file
// written afterwards that a crash could leave empty), so after a restart
// every claimed ID is still claimed.
type IDAllocator struct {
	dir         string
	first, last uint32

	mu   sync.Mutex
	next uint32 // where the next search starts; only a hint
}

// NewIDAllocator returns an allocator for IDs first..last (inclusive) whose
// claims live in dir, which is created if missing. The directory must be on
// persistent storage and belong to this allocator alone.
func NewIDAllocator(dir string, first, last uint32) (*IDAllocator, error) {
	if first == 0 || first > last {
		return nil, fmt.Errorf("creating project ID allocator: invalid range %d..%d (ID 0 is reserved)", first, last)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating project ID allocator: %w", err)
	}
	a := &IDAllocator{dir: dir, first: first, last: last, next: first}
	claims, err := a.Claimed()
	if err != nil {
		return nil, fmt.Errorf("creating project ID allocator: %w", err)
	}
	// Start after the highest claim so a fresh process does not retry
	// every claimed ID from the bottom.
	for id := range claims {
		if id >= a.next && id < last {
			a.next = id + 1
		}
	}
	return a, nil
}

func (a *IDAllocator) path(id uint32) string {
	return filepath.Join(a.dir, strconv.FormatUint(uint64(id), 10))
}

func checkOwner(owner string) error {
	if owner == "" || len(owner) > 255 || strings.ContainsRune(owner, 0) {
		return fmt.Errorf("invalid owner %q (want 1-255 bytes without NUL)", owner)
	}
	return nil
}

// Allocate claims a free ID for owner (a volume name, say) and returns it.
// Allocate does not look for an earlier claim of the same owner; callers
// that retry after a crash use Lookup first.
func (a *IDAllocator) Allocate(owner string) (uint32, error) {
	if err := checkOwner(owner); err != nil {
		return 0, fmt.Errorf("allocating project ID: %w", err)
	}
	span := uint64(a.last-a.first) + 1
	for i := uint64(0); i < span; i++ {
		id := a.take()
		err := os.Symlink(owner, a.path(id))
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("allocating project ID: %w", err)
		}
		if err := dirsync.Sync(a.dir); err != nil {
			os.Remove(a.path(id))
			return 0, fmt.Errorf("allocating project ID: %w", err)
		}
		return id, nil
	}
	return 0, fmt.Errorf("allocating project ID in %d..%d: %w", a.first, a.last, ErrIDsExhausted)
}

// take returns the next candidate and advances the cursor, wrapping around.
func (a *IDAllocator) take() uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	id := a.next
	if a.next == a.last {
		a.next = a.first
	} else {
		a.next++
	}
	return id
}

// Claim records that owner holds id, for IDs found in use on existing
// volume directories at start-up (for example after the claims directory
// was lost). It succeeds if owner already holds id and fails with
// ErrIDInUse if someone else does.
func (a *IDAllocator) Claim(id uint32, owner string) error {
	if err := checkOwner(owner); err != nil {
		return fmt.Errorf("claiming project ID %d: %w", id, err)
	}
	if id < a.first || id > a.last {
		return fmt.Errorf("claiming project ID %d: outside %d..%d", id, a.first, a.last)
	}
	err := os.Symlink(owner, a.path(id))
	if errors.Is(err, os.ErrExist) {
		cur, rerr := os.Readlink(a.path(id))
		if rerr != nil {
			return fmt.Errorf("claiming project ID %d: %w", id, rerr)
		}
		if cur == owner {
			return nil
		}
		return fmt.Errorf("claiming project ID %d for %q: held by %q: %w", id, owner, cur, ErrIDInUse)
	}
	if err != nil {
		return fmt.Errorf("claiming project ID %d: %w", id, err)
	}
	if err := dirsync.Sync(a.dir); err != nil {
		return fmt.Errorf("claiming project ID %d: %w", id, err)
	}
	return nil
}

// Release frees id if owner holds it. Release only after the volume's files
// are gone: files still charged to the ID would count against the next
// owner's limit. Releasing an unclaimed ID succeeds.
func (a *IDAllocator) Release(id uint32, owner string) error {
	cur, err := os.Readlink(a.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("releasing project ID %d: %w", id, err)
	}
	if cur != owner {
		return fmt.Errorf("releasing project ID %d for %q: held by %q: %w", id, owner, cur, ErrIDInUse)
	}
	if err := os.Remove(a.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("releasing project ID %d: %w", id, err)
	}
	return nil
}

// Owner returns who holds id, if anyone. It reads that one claim, so it
// is cheap enough for every request (unlike Lookup and Claimed, which list
// the whole directory). A path at id's name that is not a claim (not a
// symlink) is an error, not "unclaimed": Allocate could never take that ID.
func (a *IDAllocator) Owner(id uint32) (owner string, held bool, err error) {
	owner, err = os.Readlink(a.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading the claim of project ID %d: %w", id, err)
	}
	return owner, true, nil
}

// Lookup returns the ID held by owner, if any. It reads every claim, so it
// is meant for recovery, not for every request.
func (a *IDAllocator) Lookup(owner string) (id uint32, ok bool, err error) {
	claims, err := a.Claimed()
	if err != nil {
		return 0, false, err
	}
	for id, o := range claims {
		if o == owner {
			return id, true, nil
		}
	}
	return 0, false, nil
}

// Claimed returns every claimed ID and its owner.
func (a *IDAllocator) Claimed() (map[uint32]string, error) {
	entries, err := os.ReadDir(a.dir)
	if err != nil {
		return nil, fmt.Errorf("listing project ID claims: %w", err)
	}
	claims := make(map[uint32]string, len(entries))
	for _, e := range entries {
		id, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || e.Type() != os.ModeSymlink {
			continue // not a claim
		}
		owner, err := os.Readlink(filepath.Join(a.dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("listing project ID claims: %w", err)
		}
		claims[uint32(id)] = owner
	}
	return claims, nil
}
