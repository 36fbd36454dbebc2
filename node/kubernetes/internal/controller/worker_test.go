package controller

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"source.plinth.dev/pkg/supervisor"
)

// TestLoopsRunEveryWorkerAndTaskAndLeaveNothingRunning: each queue gets
// its Count of workers at once (two keys whose syncs wait for each other
// finish only with two workers), the tasks run beside them, and once ctx
// ends Run returns ctx's error only after its tasks have returned and its
// queues are shut down.
func TestLoopsRunEveryWorkerAndTaskAndLeaveNothingRunning(t *testing.T) {
	q := NewBackoffQueue("test", clocktesting.NewFakeClock(time.Now()), time.Millisecond, time.Second, nil)
	q.Add("a")
	q.Add("b")
	var both sync.WaitGroup
	both.Add(2)
	synced := make(chan string, 2)
	syncKey := func(ctx context.Context, key string) error {
		both.Done()
		both.Wait() // both keys at once: two workers
		synced <- key
		return nil
	}
	taskStarted, taskEnded := make(chan struct{}), make(chan struct{})
	task := func(ctx context.Context) {
		close(taskStarted)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // a task slow to end is waited for
		close(taskEnded)
	}
	returned := make(chan error, 1)
	stop, _ := supervisor.TestHarness(t, func(ctx context.Context) error {
		err := Loops{Workers: []Workers{{Queue: q, Sync: syncKey, Count: 2}}, Tasks: []func(context.Context){task}}.Run(ctx)
		returned <- err
		return err
	})
	for range 2 {
		select {
		case <-synced:
		case <-time.After(10 * time.Second):
			t.Fatal("the two keys were not synced by two workers at once within 10 s")
		}
	}
	<-taskStarted
	stop()
	select {
	case err := <-returned:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of its context's end")
	}
	select {
	case <-taskEnded:
	default:
		t.Error("Run returned before its task had")
	}
	if !q.queue.ShuttingDown() {
		t.Error("Run returned with its queue not shut down")
	}
}
