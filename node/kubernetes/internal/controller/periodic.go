package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/utils/clock"
)

// StartInformers starts every informer made from the factories, with a
// context of their own, and waits until their caches are filled. The
// returned stop cancels them and waits until they have ended; call it
// whatever the error.
func StartInformers(ctx context.Context, factories ...informers.SharedInformerFactory) (stop func(), err error) {
	ictx, cancel := context.WithCancel(ctx)
	stop = func() {
		cancel()
		for _, f := range factories {
			f.Shutdown()
		}
	}
	for _, f := range factories {
		f.Start(ictx.Done())
	}
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return stop, errors.Join(fmt.Errorf("syncing the cache of %v", typ), ctx.Err())
			}
		}
	}
	return stop, nil
}

// Every is a task (Loops.Tasks) that calls f at once and then every
// interval of clk until its context ends. The controllers that look at the
// world on a schedule rather than per event (volume health, node removal,
// the capacity publisher's poll) run on it.
func Every(clk clock.WithTicker, interval time.Duration, f func(context.Context)) func(context.Context) {
	return func(ctx context.Context) {
		tick := clk.NewTicker(interval)
		defer tick.Stop()
		for {
			f(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C():
			}
		}
	}
}
