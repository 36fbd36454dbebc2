package provisioner

import (
	"context"
	"fmt"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"source.plinth.dev/node/kubernetes/internal/controllertest"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/volume"
)

// TestCrashSafety kills plinth-node with SIGKILL at random moments while 200
// provisions and deletions run, restarts it every time, lets it settle and
// checks the invariants: no volume without a PV or claim (leak), no PV
// without its volume, no claim with two volumes, every claim bound, and the
// data of bound volumes untouched.
func TestCrashSafety(t *testing.T) {
	e := newEnv(t, true)
	cp := controllertest.ControlPlane(t)
	const grace = 3 * time.Second
	p := e.NodeProcess(t, "--orphan-grace-period="+grace.String())
	// Every other start, a tight client budget makes API writes wait,
	// which widens the window between creating a volume and creating its
	// PV: the crash that leaves an orphan becomes likely instead of rare.
	// The other starts are fast, so kills also land in volume operations.
	p.Extra = controllertest.EveryOtherStart(20, 5)
	p.Start()
	t.Cleanup(func() {
		p.Kill(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("plinth-node log (tail):\n%s", p.LogTail())
		}
	})

	cfg := rest.CopyConfig(cp.RESTConfig)
	cfg.QPS, cfg.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 42))

	// The killer: SIGKILL at random moments, restart right away.
	stopKiller := make(chan struct{})
	var kills int
	var killerDone sync.WaitGroup
	killerDone.Go(func() {
		krnd := rand.New(rand.NewPCG(seed, 7))
		for {
			select {
			case <-stopKiller:
				return
			case <-time.After(time.Duration(20+krnd.IntN(500)) * time.Millisecond):
			}
			p.Kill(syscall.SIGKILL)
			kills++
			p.Start()
		}
	})

	// The workload: 200 operations, about 2/3 creations and 1/3 deletions.
	var live []*corev1.PersistentVolumeClaim
	deleted := map[types.UID]bool{}
	for i := range 200 {
		if len(live) == 0 || rnd.IntN(3) < 2 {
			c := controllertest.Claim{Name: fmt.Sprintf("c%03d", i), Size: "4Mi"}
			if rnd.IntN(4) == 0 {
				c.Mode = corev1.PersistentVolumeBlock
			}
			pvc, err := client.CoreV1().PersistentVolumeClaims(e.NS).Create(ctx, e.ClaimObject(c), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			live = append(live, pvc)
		} else {
			// Often the newest claim: its provisioning is likely under way,
			// which is where a crash can leave a volume without a PV.
			k := len(live) - 1
			if rnd.IntN(2) == 0 {
				k = rnd.IntN(len(live))
			}
			victim := live[k]
			live = slices.Delete(live, k, k+1)
			if err := client.CoreV1().PersistentVolumeClaims(e.NS).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			deleted[victim.UID] = true
		}
		time.Sleep(time.Duration(rnd.IntN(40)) * time.Millisecond)
		if i%20 == 0 {
			markBound(t, client, e, live)
		}
	}
	close(stopKiller)
	killerDone.Wait()
	t.Logf("200 operations done with %d kills; %d claims live, %d deleted", kills, len(live), len(deleted))
	if kills < 5 {
		t.Errorf("only %d kills during the workload; the test did not exercise crashes", kills)
	}

	// Settle: everything converges without further help.
	var problems []string
	settleStart := time.Now()
	deadline := settleStart.Add(3 * time.Minute)
	for {
		markBound(t, client, e, live)
		problems = checkInvariants(t, client, e, live)
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if len(problems) > 0 {
		t.Fatalf("after settling, %d invariant violations:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	p.Kill(syscall.SIGTERM)
	// What the crashes left for the restarts to clean up, from the log.
	log, _ := os.ReadFile(p.Log)
	t.Logf("settled in %s; plinth-node recovered %d interrupted volume operations and removed %d orphans",
		time.Since(settleStart).Round(100*time.Millisecond),
		strings.Count(string(log), "recovered volume"), strings.Count(string(log), "audit: deleted orphaned volume"))
}

// markerName is a file the test writes into each bound filesystem volume; it
// must survive everything the controller does.
const markerName = "crash-test-marker"

// markBound writes a marker into every bound filesystem volume that has
// none yet.
func markBound(t *testing.T, client kubernetes.Interface, e *env, live []*corev1.PersistentVolumeClaim) {
	t.Helper()
	for _, pvc := range live {
		cur, err := client.CoreV1().PersistentVolumeClaims(e.NS).Get(context.Background(), pvc.Name, metav1.GetOptions{})
		if err != nil || cur.Status.Phase != corev1.ClaimBound {
			continue
		}
		mode, path, err := e.Vols.Locate(context.Background(), ownership.VolumeIDFor(pvc.UID))
		if err != nil || mode != volume.Filesystem {
			continue
		}
		marker := filepath.Join(path, markerName)
		if !controllertest.FileExists(marker) {
			if err := os.WriteFile(marker, []byte(pvc.UID), 0o644); err != nil {
				t.Errorf("writing marker into %s: %v", path, err)
			}
		}
	}
}

// checkInvariants returns the violations of the crash-safety invariants.
func checkInvariants(t *testing.T, client kubernetes.Interface, e *env, live []*corev1.PersistentVolumeClaim) []string {
	t.Helper()
	ctx := context.Background()
	var problems []string
	pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{ownership.LabelNode: ownership.NodeLabelValue(e.Node)}.String(),
	})
	if err != nil {
		return []string{err.Error()}
	}
	entries, err := e.Vols.List(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	volumes := map[string]int{}
	for _, en := range entries {
		if en.Pending != "" || en.Problem != "" {
			problems = append(problems, fmt.Sprintf("volume %q (%s): pending %q, problem %q", en.ID, en.Name, en.Pending, en.Problem))
		}
		volumes[en.ID]++
	}
	liveUIDs := map[types.UID]*corev1.PersistentVolumeClaim{}
	for _, pvc := range live {
		liveUIDs[pvc.UID] = pvc
	}
	pvByName := map[string]*corev1.PersistentVolume{}
	claimsWithPV := map[types.UID]int{}
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		pvByName[pv.Name] = pv
		if volumes[pv.Name] == 0 {
			problems = append(problems, fmt.Sprintf("PV %s (%s) has no volume", pv.Name, pv.Status.Phase))
		}
		if pv.Spec.ClaimRef != nil {
			claimsWithPV[pv.Spec.ClaimRef.UID]++
		}
	}
	for id, n := range volumes {
		if n > 1 {
			problems = append(problems, fmt.Sprintf("volume %s listed %d times", id, n))
		}
		uid, _ := ownership.ClaimUIDOf(id)
		if pvByName[id] == nil && liveUIDs[uid] == nil {
			problems = append(problems, fmt.Sprintf("leaked volume %s: no PV, no claim", id))
		}
	}
	for uid, n := range claimsWithPV {
		if n > 1 {
			problems = append(problems, fmt.Sprintf("claim %s has %d PVs", uid, n))
		}
		if liveUIDs[uid] == nil {
			problems = append(problems, fmt.Sprintf("PV of deleted claim %s still exists", uid))
		}
	}
	for _, pvc := range live {
		cur, err := client.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, pvc.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			problems = append(problems, fmt.Sprintf("claim %s vanished", pvc.Name))
			continue
		case err != nil:
			problems = append(problems, err.Error())
			continue
		case cur.Status.Phase != corev1.ClaimBound:
			problems = append(problems, fmt.Sprintf("claim %s is %s", pvc.Name, cur.Status.Phase))
		}
		id := ownership.VolumeIDFor(pvc.UID)
		if volumes[id] != 1 {
			problems = append(problems, fmt.Sprintf("claim %s has %d volumes", pvc.Name, volumes[id]))
		}
		if mode, path, err := e.Vols.Locate(ctx, id); err == nil && mode == volume.Filesystem {
			// Every bound filesystem volume has been marked by now (markBound
			// runs before each check); the marker must still be there.
			if b, err := os.ReadFile(filepath.Join(path, markerName)); err != nil || string(b) != string(pvc.UID) {
				problems = append(problems, fmt.Sprintf("claim %s: marker in its volume is missing or changed (%v)", pvc.Name, err))
			}
		}
	}
	return problems
}
