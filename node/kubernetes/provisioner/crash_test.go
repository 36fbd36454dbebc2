package provisioner

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/controllertest"
	"source.plinth.dev/test/ktest"
)

// minKills is the fewest SIGKILLs TestCrashSafety accepts during its 250
// operations. Runs see 25 to 32 (a kill 20-320 ms after a fast start,
// 250-650 ms after a tight one); 15 leaves room for a slow machine and
// still means many restarts in the middle of work.
const minKills = 15

// maxLiveClaims bounds the claims alive at once to what the kernel-test
// VM's data disk holds (512 MiB of XFS; 4 MiB a claim, with room for the
// volumes of half-done creations and orphans awaiting the sweep). The
// random walk of creations (2 in 3) and deletions otherwise ends near 83
// claims on average but past 110 now and then, and then the node rightly
// refuses the last claims for want of space (one CI run: 111 live, 7
// Pending, "not enough space").
const maxLiveClaims = 80

// TestCrashSafety kills plinth-node with SIGKILL at random moments while 250
// provisions and deletions run, restarts it every time, lets it settle and
// checks the invariants: no volume without a PV or claim (leak), no state
// of the volume layer without its volume (project ID claims, quota records,
// reclaim-policy and intent records: see countState), no PV
// without its volume, no claim with two volumes, every claim bound, and the
// data of every bound volume, filesystem or block, exactly as written when
// its claim was first bound. It also proves the crashes hit the windows
// that matter: kills landed between creating a volume and creating its PV
// and in the middle of deletions, and the restarts removed the orphans the
// first window leaves when the claim goes away meanwhile.
func TestCrashSafety(t *testing.T) {
	e := newEnv(t, true)
	p := startCrashNode(t, e)
	r := runCrashSchedule(t, e, p, 250)
	if len(r.midDelete) == 0 {
		r.killMidDeletion(t, p)
	}
	t.Logf("%d kills; caught right after a kill: %d volumes without their PV, %d deletions half done, %d creations half done; %d markers written meanwhile (%d block)",
		r.kills, len(r.unbacked), len(r.midDelete), len(r.midCreate), len(r.markers), r.blockMarkers())
	if r.kills < minKills {
		t.Errorf("only %d kills during the workload; the test needs at least %d to mean something", r.kills, minKills)
	}
	if len(r.unbacked) == 0 {
		t.Errorf("no kill landed between creating a volume and creating its PV")
	}
	// The markers must have lived through kills to prove anything.
	if len(r.markers) == 0 || r.blockMarkers() == 0 || r.blockMarkers() == len(r.markers) {
		t.Errorf("markers written during the workload: %d, %d of them in block volumes; want both kinds",
			len(r.markers), r.blockMarkers())
	}

	// Settle: everything converges without further help.
	settleStart := time.Now()
	// Lost data never comes back: no need to wait for the rest then.
	v := r.settle(t, 3*time.Minute, func(v violations) bool { return v.none() || len(v.lost) > 0 })
	if !v.none() {
		t.Fatalf("after settling, invariant violations:\n%s", strings.Join(v.all(), "\n"))
	}
	settled := time.Since(settleStart)
	p.Kill(syscall.SIGTERM)
	if n := len(r.replaced); n > 0 {
		unsaid := 0 // an Event seen late (sent behind the client's rate limit) does not count
		for uid := range r.unsaid {
			if _, onlyLogged := r.handedBackForRoom(t, uid); onlyLogged {
				unsaid++
			}
		}
		t.Logf("the node handed back %d claims for want of room while deletions lagged (%d of them said so only in its log, the process killed before the Event); the settle placed them again, as a scheduler would", n, unsaid)
	}
	t.Logf("volume layer state after the settle: %s", r.state)

	// What the restarts found, from plinth-node's log: the orphans that
	// kills between volume and PV left behind, once their claims were
	// deleted, must have been removed, and only volumes of deleted claims.
	rec := readRecoveryLog(t, p)
	actions := map[string]int{}
	for _, a := range rec.recovered {
		actions[a]++
	}
	t.Logf("settled in %s; plinth-node removed %d orphans and recovered %d interrupted volume operations %v; %d processes killed between deleting a volume's data and its PV",
		settled.Round(100*time.Millisecond), len(rec.orphans), len(rec.recovered), actions, len(rec.cutDeletions))
	// A kill in the middle of a deletion: seen in the state right after
	// it, or in the log of the process it ended.
	if len(r.midDelete)+len(rec.cutDeletions) == 0 {
		t.Errorf("no kill landed in the middle of a deletion (data removed or being removed, PV not yet deleted)")
	}
	if len(rec.orphans) == 0 {
		t.Errorf("plinth-node removed no orphaned volume: no kill left a volume without PV whose claim was then deleted")
	}
	for id := range rec.orphans {
		if uid, _ := ownership.ClaimUIDOf(id); !r.deleted[uid] {
			t.Errorf("plinth-node removed volume %s as an orphan, but its claim was not deleted", id)
		}
	}
	for _, f := range rec.failed {
		t.Errorf("a recovery failed: %s", f)
	}
}

// TestCrashSafetyFindsLeaks is the negative control of TestCrashSafety: the
// same crash schedule, shorter, against a plinth-node whose orphan removal
// is off (a test-only flag). Volumes that kills left without PV, whose
// claims were then deleted, must stay and be reported as leaks; if they
// were not, TestCrashSafety could not fail on a broken orphan reconciler.
func TestCrashSafetyFindsLeaks(t *testing.T) {
	e := newEnv(t, true)
	p := startCrashNode(t, e, "--test-only-no-orphan-removal")
	r := runCrashSchedule(t, e, p, 200)
	t.Logf("%d kills; %d volumes caught without their PV", r.kills, len(r.unbacked))

	// Everything else converges; the leaks stay. Settled is when nothing
	// but leaks is wrong and the leaks did not change over a check.
	var prev []string
	v := r.settle(t, time.Minute, func(v violations) bool {
		done := len(v.other)+len(v.lost)+len(v.state) == 0 && slices.Equal(v.leaks, prev)
		prev = v.leaks
		return done
	})
	p.Kill(syscall.SIGTERM)
	if len(v.other)+len(v.lost)+len(v.state) > 0 {
		t.Fatalf("after settling, violations other than leaked volumes:\n%s", strings.Join(slices.Concat(v.lost, v.state, v.other), "\n"))
	}
	if len(v.leaks) == 0 {
		t.Fatalf("no leak found with orphan removal off (%d kills, %d volumes caught without their PV): "+
			"the crash test cannot see a broken orphan reconciler", r.kills, len(r.unbacked))
	}
	t.Logf("%d leaks found, as they must be:\n%s", len(v.leaks), strings.Join(v.leaks, "\n"))
	if rec := readRecoveryLog(t, p); len(rec.orphans) > 0 {
		t.Errorf("plinth-node removed %d orphans although orphan removal was off", len(rec.orphans))
	}
}

// startCrashNode starts plinth-node for a crash test, with a short orphan
// grace period and retention and args added; it is killed when the test
// ends. A kill between a volume's record and its PV leaves a volume with
// a record and no PV: once its claim is deleted, it goes into quarantine
// and, a second later, away.
func startCrashNode(t *testing.T, e *env, args ...string) *controllertest.NodeProcess {
	t.Helper()
	p := e.NodeProcess(t, append([]string{"--orphan-grace-period=3s", "--orphan-retention=1s"}, args...)...)
	// Every other start, a tight client budget (10 requests a second)
	// makes API writes wait, which widens the window between creating a
	// volume and creating its PV, and the one between deleting a volume's
	// data and its PV: the crash that leaves an orphan becomes likely
	// instead of rare. The other starts are fast, so kills also land in
	// volume operations.
	p.Extra = controllertest.EveryOtherStart(10, 10)
	p.Start()
	t.Cleanup(func() {
		p.Kill(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("plinth-node log (tail):\n%s", p.LogTail())
		}
	})
	return p
}

// crashRun is one run of the crash schedule: the claims it left, what the
// killer caught, and the markers written into bound volumes.
type crashRun struct {
	e       *env
	node    *controllertest.NodeProcess
	client  kubernetes.Interface
	live    []*corev1.PersistentVolumeClaim
	deleted map[types.UID]bool
	kills   int
	// The volumes found, right after a kill, in the middle of an
	// operation (see observe), by ID.
	unbacked, midDelete, midCreate map[string]bool
	// markers are the markers written, by claim: each once, when the
	// claim was first seen bound, and afterwards only read.
	markers map[types.UID]marker
	// quotaBaseline is the quota records before the run; state what the
	// last check counted of the volume layer's state.
	quotaBaseline map[uint32]fsquota.Quota
	state         stateCount
	// orphaned counts the claims deleted while plinth-node was down and
	// their volume had no PV.
	orphaned int
	// replaced counts, by claim, the times the settle placed a claim the
	// node had handed back again (placeHandedBack).
	replaced map[types.UID]int
	// unsaid are the claims among them whose hand-back only the node's
	// log told of when the settle placed them again.
	unsaid map[types.UID]bool
}

// marker is what was written into a bound volume.
type marker struct {
	mode volume.Mode
	data string
}

// runCrashSchedule runs ops operations against plinth-node p while a
// killer SIGKILLs it at random moments and restarts it at once: about 2/3
// provisions (a quarter of them block), 1/3 deletions (the newest claim,
// or one to four bound ones). Every 10 operations it marks the volumes of
// newly bound claims.
func runCrashSchedule(t *testing.T, e *env, p *controllertest.NodeProcess, ops int) *crashRun {
	t.Helper()
	cfg := rest.CopyConfig(controllertest.ControlPlane(t).RESTConfig)
	cfg.QPS, cfg.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &crashRun{
		e: e, node: p, client: client, deleted: map[types.UID]bool{},
		unbacked: map[string]bool{}, midDelete: map[string]bool{}, midCreate: map[string]bool{},
		markers: map[types.UID]marker{}, quotaBaseline: quotaBaseline(t, e), replaced: map[types.UID]int{}, unsaid: map[types.UID]bool{},
	}
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 42))

	// The killer: SIGKILL at random moments, a look at what the kill
	// interrupted, and a restart right away. A start with the tight budget
	// lives longer: once past its start-up, every write it makes waits
	// its turn, so its volumes wait for their PVs and its deleted data for
	// the PV's deletion, and a kill then lands in the middle of both.
	//
	// Under TCG (the kernel-test VM) a start takes longer than any of
	// these lives, so no kill would land in the work; there a life is
	// counted from the moment the start's provisioner runs.
	//
	// Now and then (always, until one was made) the killer also has the
	// claim of a volume it caught without its PV deleted before the
	// restart, as a user may delete a claim while the node is down: the
	// restart then finds an orphan. Left to a coin for every catch, a
	// short schedule (TestCrashSafetyFindsLeaks') could end with none,
	// and its negative control prove nothing.
	// (Left to chance, that needs the claim deleted right after the kill;
	// under TCG the deletion of a new claim lands before its volume is
	// made, and no orphan ever formed.)
	stopKiller := make(chan struct{})
	orphanings := make(chan *orphaning)
	var killerDone sync.WaitGroup
	// The killer stops before the test's end whatever happens (a Fatal in
	// the schedule included), so it never restarts plinth-node after the
	// node's cleanup or logs after the test.
	stopKilling := sync.OnceFunc(func() { close(stopKiller); killerDone.Wait() })
	t.Cleanup(stopKilling)
	killerDone.Go(func() {
		krnd := rand.New(rand.NewPCG(seed, 7))
		var logStart int64 // where the current start's log begins
		orphaned := false  // a claim was deleted while the node was down
		for {
			if ktest.InVM() && !p.WaitLogged(provisionerStarted, logStart, startTimeout, stopKiller) {
				t.Errorf("plinth-node start %d: its provisioner did not start within %s", r.kills+1, startTimeout)
			}
			life := time.Duration(20+krnd.IntN(300)) * time.Millisecond
			if controllertest.TightStart(r.kills + 1) {
				life = time.Duration(250+krnd.IntN(400)) * time.Millisecond
			}
			select {
			case <-stopKiller:
				return
			case <-time.After(life):
			}
			p.Kill(syscall.SIGKILL)
			r.kills++
			// The schedule may end while the orphaning waits for it; the
			// restart below must happen all the same, or the settle
			// would check a node that is not running.
			stopped := false
			if fresh := r.observe(ctx); len(fresh) > 0 && (!orphaned || krnd.IntN(2) == 0) {
				uid, _ := ownership.ClaimUIDOf(fresh[krnd.IntN(len(fresh))])
				o := &orphaning{uid: uid, done: make(chan struct{})}
				select {
				case orphanings <- o:
					select { // the schedule closes done, unless it failed first
					case <-o.done:
						orphaned = orphaned || o.deleted
					case <-stopKiller:
						stopped = true
					}
				case <-stopKiller:
					stopped = true
				}
			}
			logStart = p.LogSize()
			if err := p.StartErr(); err != nil {
				t.Errorf("restarting plinth-node: %v", err)
				return
			}
			if stopped {
				return
			}
		}
	})

	for i := range ops {
		select {
		case o := <-orphanings:
			if k := slices.IndexFunc(r.live, func(c *corev1.PersistentVolumeClaim) bool { return c.UID == o.uid }); k >= 0 {
				r.deleteClaim(t, k)
				r.orphaned++
				o.deleted = true
			}
			close(o.done)
		default:
		}
		if len(r.live) == 0 || (len(r.live) < maxLiveClaims && rnd.IntN(3) < 2) {
			c := controllertest.Claim{Name: fmt.Sprintf("c%03d", i), Size: "4Mi"}
			if rnd.IntN(4) == 0 {
				c.Mode = corev1.PersistentVolumeBlock
			}
			pvc, err := client.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, e.ClaimObject(c), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r.live = append(r.live, pvc)
		} else {
			// Half the time the newest claim: its provisioning is likely
			// under way, which is where a crash can leave a volume without
			// a PV.
			if rnd.IntN(2) == 0 {
				r.deleteClaim(t, len(r.live)-1)
			} else {
				// Otherwise claims known to be bound (marked), now and then
				// several at once (a StatefulSet scaled down): each deletion
				// goes through the PV (the data first, then the PV), and
				// they queue for the API budget, so the data of some is
				// gone while their PVs wait: the window of a crash in the
				// middle of a deletion.
				n := 1
				if rnd.IntN(3) == 0 {
					n = 2 + rnd.IntN(3)
				}
				for range n {
					var bound []int
					for k, pvc := range r.live {
						if _, ok := r.markers[pvc.UID]; ok {
							bound = append(bound, k)
						}
					}
					if len(bound) == 0 {
						break
					}
					r.deleteClaim(t, bound[rnd.IntN(len(bound))])
				}
			}
		}
		time.Sleep(time.Duration(rnd.IntN(40)) * time.Millisecond)
		if i%10 == 0 {
			r.mark(t)
		}
	}
	stopKilling()
	if !p.Running() {
		t.Fatalf("the killer left plinth-node down after %d kills: nothing could settle", r.kills)
	}
	t.Logf("%d operations done with %d kills; %d claims live, %d deleted (%d of them while plinth-node was down, their volume without PV)",
		ops, r.kills, len(r.live), len(r.deleted), r.orphaned)
	return r
}

// deleteClaim deletes the live claim at index k.
func (r *crashRun) deleteClaim(t *testing.T, k int) {
	t.Helper()
	victim := r.live[k]
	r.live = slices.Delete(r.live, k, k+1)
	if err := r.client.CoreV1().PersistentVolumeClaims(r.e.NS).Delete(context.Background(), victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.deleted[victim.UID] = true
}

// orphaning asks the schedule to delete a claim, and says when it did.
type orphaning struct {
	uid  types.UID
	done chan struct{}
	// deleted is set, before done is closed, when the claim was still
	// live and is now deleted.
	deleted bool
}

// markerName is a file the test writes into each bound filesystem volume.
const markerName = "crash-test-marker"

// mark writes a marker into the volume of every live claim seen bound for
// the first time, as its pod would: a file in a filesystem volume, the
// first bytes of a block volume's image (what a pod writes through the
// loop device lands there). A claim marked before is left alone: its
// marker must survive everything, and is only read (checkMarker).
func (r *crashRun) mark(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, pvc := range r.live {
		if _, done := r.markers[pvc.UID]; done {
			continue
		}
		cur, err := r.client.CoreV1().PersistentVolumeClaims(r.e.NS).Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil || cur.Status.Phase != corev1.ClaimBound {
			continue
		}
		mode, path, err := r.e.Vols.Locate(ctx, ownership.VolumeIDFor(pvc.UID))
		if err != nil {
			continue // a bound claim without its volume: the check reports it
		}
		m := marker{mode: mode, data: fmt.Sprintf("crash-test marker of claim %s\n", pvc.UID)}
		if mode == volume.Filesystem {
			path = filepath.Join(path, markerName)
		}
		if err := writeMarker(path, mode, m.data); err != nil {
			t.Errorf("marking the volume of claim %s: %v", pvc.Name, err)
			continue
		}
		r.markers[pvc.UID] = m
	}
}

// writeMarker writes data into a new file (filesystem) or over the start of
// an image (block), leaving the image's size alone.
func writeMarker(path string, mode volume.Mode, data string) error {
	flags := os.O_WRONLY
	if mode == volume.Filesystem {
		flags |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(data), 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// checkMarker returns what is wrong with the marker of pvc's volume: not
// there, changed, or its volume not what was marked. Unmarked claims have
// nothing to check.
func (r *crashRun) checkMarker(ctx context.Context, pvc *corev1.PersistentVolumeClaim) string {
	m, ok := r.markers[pvc.UID]
	if !ok {
		return ""
	}
	mode, path, err := r.e.Vols.Locate(ctx, ownership.VolumeIDFor(pvc.UID))
	if err != nil {
		return fmt.Sprintf("claim %s: its marked volume is gone: %v", pvc.Name, err)
	}
	if mode != m.mode {
		return fmt.Sprintf("claim %s: its volume was marked as %s and is now %s", pvc.Name, m.mode, mode)
	}
	if mode == volume.Filesystem {
		path = filepath.Join(path, markerName)
	}
	got := make([]byte, len(m.data))
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("claim %s: the marker in its %s volume is missing: %v", pvc.Name, mode, err)
	}
	n, err := f.ReadAt(got, 0)
	f.Close()
	if err != nil && err != io.EOF {
		return fmt.Sprintf("claim %s: reading the marker in its %s volume: %v", pvc.Name, mode, err)
	}
	if string(got[:n]) != m.data {
		return fmt.Sprintf("claim %s: the marker in its %s volume changed: read %q", pvc.Name, mode, got[:n])
	}
	return ""
}

// blockMarkers counts the markers written into block volumes.
func (r *crashRun) blockMarkers() int {
	n := 0
	for _, m := range r.markers {
		if m.mode == volume.Block {
			n++
		}
	}
	return n
}
