package supervisor

import (
	"strings"
	"testing"
	"time"

	"source.plinth.dev/pkg/logtree"
)

// waitFor polls cond until it holds or a generous deadline passes. Tests
// assert on eventual state this way instead of sleeping for fixed times.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// recv receives from ch or fails the test after a generous deadline.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// logLines returns the messages logged under dn (not below it).
func logLines(t *testing.T, lt *logtree.LogTree, dn logtree.DN) []string {
	t.Helper()
	r, err := lt.Read(dn, logtree.WithBacklog(logtree.BacklogAll))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range r.Backlog {
		out = append(out, e.Message)
	}
	return out
}

// logLinesWith returns the messages under dn that start with prefix.
func logLinesWith(t *testing.T, lt *logtree.LogTree, dn logtree.DN, prefix string) []string {
	t.Helper()
	var out []string
	for _, l := range logLines(t, lt, dn) {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}
