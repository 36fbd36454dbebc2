package controller

import (
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// consumer hands out the queue's keys on a channel, so a test can wait for
// the next key with a timeout without leaving a Get behind that would steal
// a later key.
func consumer(q *BackoffQueue) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		for {
			k, ok := q.Get()
			if !ok {
				return
			}
			ch <- k
		}
	}()
	return ch
}

// within returns the next key, or "" if none comes within d of real time
// (the fake clock does not move meanwhile).
func within(ch <-chan string, d time.Duration) string {
	select {
	case k := <-ch:
		return k
	case <-time.After(d):
		return ""
	}
}

// TestBackoffNotBypassedByUpdates is the property the queue exists for: once
// a key failed, adding it again (as every informer update does) does not get
// it processed before its backoff expires.
func TestBackoffNotBypassedByUpdates(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q := NewBackoffQueue("test", clk, time.Second, time.Minute, nil)
	defer q.ShutDown()
	keys := consumer(q)

	q.Add("a")
	if k := within(keys, 10*time.Second); k != "a" {
		t.Fatalf("first Get = %q", k)
	}
	q.Done("a", errors.New("disk full")) // backoff 1s
	q.Done("a", nil)                     // no-op safety: not in processing, must not panic

	// Re-fail to get a longer backoff: process again after 1s.
	clk.Step(time.Second)
	if k := within(keys, 10*time.Second); k != "a" {
		t.Fatalf("retry after backoff = %q", k)
	}
	q.Done("a", errors.New("disk full")) // second failure
	if f := q.Failures("a"); f < 1 {
		t.Fatalf("failures = %d", f)
	}
	// Updates arrive during the backoff: nothing may be handed out.
	for range 5 {
		q.Add("a")
	}
	if k := within(keys, 200*time.Millisecond); k != "" {
		t.Fatalf("update bypassed backoff: got %q before the deadline", k)
	}
	// Past the deadline, it is processed (once).
	clk.Step(2 * time.Second)
	if k := within(keys, 10*time.Second); k != "a" {
		t.Fatalf("after backoff = %q", k)
	}
	q.Done("a", nil)
	if f := q.Failures("a"); f != 0 {
		t.Errorf("failures after success = %d", f)
	}
	// With the backoff cleared, an update is processed at once.
	q.Add("a")
	if k := within(keys, 10*time.Second); k != "a" {
		t.Fatalf("update after success = %q", k)
	}
	q.Done("a", nil)
}

func TestBackoffGrowsAndCaps(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q := NewBackoffQueue("test", clk, time.Second, 4*time.Second, nil)
	defer q.ShutDown()
	keys := consumer(q)
	// Each failure doubles the delay before the next attempt, up to 4 s.
	for i, d := range []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		q.Add("k")
		if d > 0 {
			clk.Step(d - time.Millisecond)
			if k := within(keys, 100*time.Millisecond); k != "" {
				t.Fatalf("attempt %d handed out before its %s backoff", i, d)
			}
			clk.Step(time.Millisecond)
		}
		if k := within(keys, 10*time.Second); k != "k" {
			t.Fatalf("attempt %d not handed out after its %s backoff", i, d)
		}
		q.Done("k", errors.New("fail"))
	}
}

// TestRetryEndsTheBackoff: a key backing off after failures is handed out
// at once by Retry (its cause is gone), where Add keeps it waiting.
func TestRetryEndsTheBackoff(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q := NewBackoffQueue("test", clk, time.Minute, time.Hour, nil)
	defer q.ShutDown()
	keys := consumer(q)
	q.Add("a")
	if k := within(keys, 10*time.Second); k != "a" {
		t.Fatalf("first Get = %q", k)
	}
	q.Done("a", errors.New("class not found")) // backoff: a minute
	q.Add("a")
	if k := within(keys, 200*time.Millisecond); k != "" {
		t.Fatalf("Add bypassed the backoff: got %q", k)
	}
	q.Retry("a")
	if k := within(keys, 10*time.Second); k != "a" {
		t.Fatalf("Retry during the backoff handed out %q, want a at once", k)
	}
	if f := q.Failures("a"); f != 0 {
		t.Errorf("failures after Retry = %d, want 0", f)
	}
	q.Done("a", nil)
}
