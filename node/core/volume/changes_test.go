package volume

import (
	"context"
	"testing"
)

// TestChanged: every operation that writes to the data filesystem wakes
// the waiters of Changed once it has returned, and those that only read
// (or find nothing to write) do not. A waiter that takes a new channel
// after being woken waits for the next change.
func TestChanged(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, t.TempDir())
	woken := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	steps := []struct {
		name   string
		op     func() error
		change bool
	}{
		{"Create", func() error { _, err := m.Create(ctx, "v", Block, MiB); return err }, true},
		{"Stat", func() error { _, err := m.Stat(ctx, "v"); return err }, false},
		{"List", func() error { _, err := m.List(ctx); return err }, false},
		{"Space", func() error { _, err := m.Space(ctx); return err }, false},
		{"SetReclaimPolicy", func() error { return m.SetReclaimPolicy(ctx, "v", ReclaimDelete) }, true},
		{"SetReclaimPolicy unchanged", func() error { return m.SetReclaimPolicy(ctx, "v", ReclaimDelete) }, false},
		{"Expand", func() error { _, err := m.Expand(ctx, "v", 2*MiB); return err }, true},
		{"Recover", func() error { _, err := m.Recover(ctx); return err }, true},
		{"Delete", func() error { return m.Delete(ctx, "v") }, true},
		{"Create refused", func() error {
			if _, err := m.Create(ctx, "w", Block, 1<<62); err == nil {
				t.Error("Create of 4 EiB succeeded")
			}
			return nil
		}, true},
	}
	for _, s := range steps {
		ch := m.Changed()
		if woken(ch) {
			t.Fatalf("before %s: a fresh channel is already closed", s.name)
		}
		if err := s.op(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := woken(ch); got != s.change {
			t.Errorf("%s: waiters woken %v, want %v", s.name, got, s.change)
		}
	}
}
