package resizer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"source.plinth.dev/test/ktest"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/test/controllertest"
)

// TestResizeCrashSafety kills plinth-node with SIGKILL at random moments
// while claims are grown one after another (some first to an infeasible
// size, then back to a feasible one), restarts it every time, lets it
// settle and checks that every claim converged: claim capacity, PV
// capacity, allocated size and the volume itself all exactly the request,
// no resize status left, no interrupted operation left, and no block image
// holding more blocks than its size (an allocation done twice, or left
// past the end by an interrupted one).
func TestResizeCrashSafety(t *testing.T) {
	e := newEnv(t)
	p := e.NodeProcess(t)
	// Every other start, a tight client budget makes API writes wait,
	// which widens the windows between the steps of a resize.
	p.Extra = controllertest.EveryOtherStart(10, 2)
	p.Start()
	t.Cleanup(func() {
		p.Kill(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("plinth-node log (tail):\n%s", p.LogTail())
		}
	})

	const claims = 12
	sizes := map[string]int64{} // request in MiB, per claim
	for i := range claims {
		c := controllertest.Claim{Name: fmt.Sprintf("c%02d", i), Size: "4Mi"}
		if i%2 == 1 {
			c.Mode = corev1.PersistentVolumeBlock
		}
		e.CreateClaim(c)
		sizes[c.Name] = 4
	}
	for i := range claims {
		e.WaitBound(fmt.Sprintf("c%02d", i))
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 42))

	// The killer: SIGKILL at random moments, restart right away. Right
	// after each kill it counts the claims caught mid-resize.
	stopKiller := make(chan struct{})
	var kills atomic.Int32
	var midResize int
	var killerDone sync.WaitGroup
	// The killer stops before the test's end whatever happens (a Fatal in
	// the workload included), so it never restarts plinth-node after the
	// node's cleanup or logs after the test.
	stopKilling := sync.OnceFunc(func() { close(stopKiller); killerDone.Wait() })
	t.Cleanup(stopKilling)
	killerDone.Go(func() {
		krnd := rand.New(rand.NewPCG(seed, 7))
		var logStart int64 // where the current start's log begins
		for {
			// Under TCG (the kernel-test VM) a start takes longer than
			// any of these lives: there a life is counted from the
			// moment the start's resizer runs.
			if ktest.InVM() && !p.WaitLogged(resizerStarted, logStart, 2*time.Minute, stopKiller) {
				t.Errorf("plinth-node start %d: its resizer did not start within 2m", kills.Load()+1)
			}
			select {
			case <-stopKiller:
				return
			case <-time.After(time.Duration(50+krnd.IntN(400)) * time.Millisecond):
			}
			p.Kill(syscall.SIGKILL)
			logStart = p.LogSize()
			kills.Add(1)
			list, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).List(context.Background(), metav1.ListOptions{})
			if err == nil {
				for _, c := range list.Items {
					if c.Status.AllocatedResourceStatuses[corev1.ResourceStorage] == corev1.PersistentVolumeClaimControllerResizeInProgress {
						midResize++
					}
				}
			}
			if err := p.StartErr(); err != nil {
				t.Errorf("restarting plinth-node: %v", err)
				return
			}
		}
	})

	// The workload: 60 requests raised by 4 to 12 MiB, and every tenth
	// first to 1Pi, lowered again a moment later. The kernel-test VM's
	// quota disk holds 512 MiB, so there the steps are 1 to 3 MiB; and a
	// start takes seconds under TCG, so there the workload goes on (up to
	// 120 requests) until the killer has had its kills.
	step, more := int64(4), 0
	if ktest.InVM() {
		step, more = 1, 60
	}
	for i := 0; i < 60 || (i < 60+more && kills.Load() < minKills); i++ {
		// Every claim is grown at least once (the first round goes
		// through them in order), so every one is checked for a
		// completed resize; the rest pick claims at random.
		k := rnd.IntN(claims)
		if i < claims {
			k = i
		}
		name := fmt.Sprintf("c%02d", k)
		if i%10 == 9 {
			e.requestRetrying(name, "1Pi")
			time.Sleep(time.Duration(100+rnd.IntN(400)) * time.Millisecond)
		}
		sizes[name] += step * int64(1+rnd.IntN(3))
		e.requestRetrying(name, fmt.Sprintf("%dMi", sizes[name]))
		time.Sleep(time.Duration(20+rnd.IntN(200)) * time.Millisecond)
	}
	stopKilling()
	if midResize == 0 {
		// The schedule leaves the kill mid-resize to chance (a resize
		// on this host's tmpfs takes milliseconds); make sure of it.
		midResize = killMidResize(t, e, p, sizes, step)
	}
	t.Logf("%d kills, %d claims caught mid-resize", kills.Load(), midResize)
	if kills.Load() < minKills {
		t.Errorf("only %d kills; the test needs at least %d to mean something", kills.Load(), minKills)
	}
	if midResize == 0 {
		t.Errorf("no kill landed while a resize was in progress")
	}

	for name, mib := range sizes {
		size := fmt.Sprintf("%dMi", mib)
		e.waitResized(name, size, 2*time.Minute)
		e.assertResized(name, size)
	}
	entries, err := e.Vols.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if en.Pending != "" || en.Problem != "" {
			t.Errorf("volume %s left with pending %q, problem %q", en.ID, en.Pending, en.Problem)
		}
	}
	for i := 1; i < claims; i += 2 {
		name := fmt.Sprintf("c%02d", i)
		pvc := e.claim(name)
		_, image, err := e.Vols.Locate(context.Background(), ownership.VolumeIDFor(pvc.UID))
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(image, &st); err != nil {
			t.Fatal(err)
		}
		q := resource.MustParse(fmt.Sprintf("%dMi", sizes[name]))
		want := q.Value()
		if st.Size != want || st.Blocks*512 < want || st.Blocks*512 > want+1<<20 {
			t.Errorf("%s: image of %d bytes holds %d bytes of blocks; want %d, fully allocated, nothing past the end",
				name, st.Size, st.Blocks*512, want)
		}
	}
}

// killMidResize grows claims one at a time and SIGKILLs plinth-node as
// soon as a watch shows a claim's resize in progress, then restarts it,
// until a kill is seen to have landed mid-resize (the claim still in
// progress right after it) or 12 tries are spent. It returns how many
// kills landed so. The restarted node must finish those resizes, which
// the test's final checks assert.
func killMidResize(t *testing.T, e *env, p *controllertest.NodeProcess, sizes map[string]int64, step int64) int {
	t.Helper()
	ctx := context.Background()
	for try := range 12 {
		name := fmt.Sprintf("c%02d", try%len(sizes))
		w, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			t.Fatalf("watching claim %s: %v", name, err)
		}
		sizes[name] += step
		e.requestRetrying(name, fmt.Sprintf("%dMi", sizes[name]))
		killed := false
		timeout := time.After(time.Minute)
	watch:
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					break watch
				}
				if c, isClaim := ev.Object.(*corev1.PersistentVolumeClaim); isClaim &&
					c.Status.AllocatedResourceStatuses[corev1.ResourceStorage] == corev1.PersistentVolumeClaimControllerResizeInProgress {
					p.Kill(syscall.SIGKILL)
					killed = true
					break watch
				}
			case <-timeout:
				break watch
			}
		}
		w.Stop()
		if !killed {
			continue
		}
		logStart := p.LogSize()
		c := e.claim(name)
		landed := c.Status.AllocatedResourceStatuses[corev1.ResourceStorage] == corev1.PersistentVolumeClaimControllerResizeInProgress
		t.Logf("forced kill %d, on claim %s's resize to %dMi: it was still in progress after the kill: %v", try+1, name, sizes[name], landed)
		if err := p.StartErr(); err != nil {
			t.Fatalf("restarting plinth-node: %v", err)
		}
		if ktest.InVM() && !p.WaitLogged(resizerStarted, logStart, 2*time.Minute, nil) {
			t.Fatalf("plinth-node did not start its resizer within 2m after a forced kill")
		}
		if landed {
			return 1
		}
	}
	return 0
}

// minKills is the fewest SIGKILLs TestResizeCrashSafety accepts.
const minKills = 10

// resizerStarted is the line a start's resizer logs once its informers
// are synced and its workers begin (run.go).
var resizerStarted = regexp.MustCompile(`\] resizer for driver \S+ on node \S+ \(hostname [^)]*\) started`)

// requestRetrying is request, retried while plinth-node restarts or the
// claim changes under the patch.
func (e *env) requestRetrying(name, size string) {
	e.T.Helper()
	var err error
	for range 50 {
		if err = e.request(name, size); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.T.Fatalf("setting the request of %s to %s: %v", name, size, err)
}
