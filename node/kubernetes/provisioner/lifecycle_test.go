package provisioner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/supervisor"
	"source.plinth.dev/test/controllertest"
)

// TestTwoNodes: two plinth-node processes (two node names, two data
// directories side by side under one parent) on one API server run the
// whole life of volumes at the same time: provisioning, deletion of
// Released PVs of a Delete class, Released PVs of a Retain class kept (and
// one of them deleted by an administrator), and the orphan sweep with a
// short grace period. After a settle each node has exactly its own volumes,
// quarantined volumes (the orphan whose Delete PV vanished) and records, every PV names the node that holds its volume, every Event
// about a deletion comes from the node that deleted, and the audit log
// shows that neither node named a PV or claim of the other in any call.
func TestTwoNodes(t *testing.T) {
	a := newEnv(t, true)
	bEnv := *a.Env
	b := &env{Env: &bEnv}
	b.Node = a.Node + "-b"
	parent := t.TempDir()
	for _, e := range []*env{a, b} {
		e.Dir = filepath.Join(parent, e.Node)
		e.Vols = controllertest.NewVolumes(t, e.Dir, true)
	}
	retainClass := a.Class + "-retain"
	a.CreateClass(retainClass, corev1.PersistentVolumeReclaimRetain, nil)
	ctx := context.Background()
	const grace = 3 * time.Second

	// What each node holds, and what must become of it.
	type world struct {
		*env
		tag      string
		claims   map[string]*corev1.PersistentVolumeClaim // by role
		removed  []string                                 // orphans the sweep must remove
		retained []string                                 // orphans it must keep
		// quarantined: orphans it must move into quarantine
		quarantined []string
	}
	nodes := []*world{{env: a, tag: "a"}, {env: b, tag: "b"}}
	// Orphans, made before the nodes start: a crash leftover (no record),
	// one whose Delete PV is gone, one whose Retain PV is gone. The twin
	// ID exists on both disks: recorded Retain on a, unrecorded on b, so
	// a keeps its copy while b removes its own.
	twin := ownership.VolumeIDFor(uuid.NewUUID())
	for _, w := range nodes {
		w.claims = map[string]*corev1.PersistentVolumeClaim{}
		mk := func(id string, p volume.ReclaimPolicy) {
			t.Helper()
			if _, err := w.Vols.Create(ctx, id, volume.Filesystem, 1<<20); err != nil {
				t.Fatal(err)
			}
			if p != volume.ReclaimUnrecorded {
				if err := w.Vols.SetReclaimPolicy(ctx, id, p); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, p := range []volume.ReclaimPolicy{volume.ReclaimUnrecorded, volume.ReclaimDelete, volume.ReclaimRetain} {
			id := ownership.VolumeIDFor(uuid.NewUUID())
			mk(id, p)
			switch p {
			case volume.ReclaimRetain:
				w.retained = append(w.retained, id)
			case volume.ReclaimDelete:
				w.quarantined = append(w.quarantined, id)
			default:
				w.removed = append(w.removed, id)
			}
		}
	}
	if _, err := nodes[0].Vols.Create(ctx, twin, volume.Filesystem, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].Vols.SetReclaimPolicy(ctx, twin, volume.ReclaimRetain); err != nil {
		t.Fatal(err)
	}
	nodes[0].retained = append(nodes[0].retained, twin)
	if _, err := nodes[1].Vols.Create(ctx, twin, volume.Filesystem, 1<<20); err != nil {
		t.Fatal(err)
	}
	nodes[1].removed = append(nodes[1].removed, twin)

	for _, w := range nodes {
		w.NodeProcess(t, "--orphan-grace-period="+grace.String()).Run()
	}

	// Claims of both nodes, made interleaved: kept (Delete and Retain),
	// released (Delete, a block one too, and Retain), and one Retain PV
	// an administrator deletes once it is released ("dropped").
	roles := []struct {
		role, class string
		mode        corev1.PersistentVolumeMode
	}{
		{"keep-delete", "", ""}, {"keep-retain", retainClass, ""},
		{"release-delete", "", ""}, {"release-block", "", corev1.PersistentVolumeBlock},
		{"release-retain", retainClass, ""}, {"dropped", retainClass, ""},
	}
	for _, r := range roles {
		for _, w := range nodes {
			w.claims[r.role] = a.CreateClaim(controllertest.Claim{Name: w.tag + "-" + r.role, Node: w.Node, Class: r.class, Mode: r.mode})
		}
	}
	id := func(w *world, role string) string { return ownership.VolumeIDFor(w.claims[role].UID) }
	for _, w := range nodes {
		for _, r := range roles {
			_, pv := a.WaitBound(w.claims[r.role].Name)
			if h, _ := ownership.AffinityHostname(pv); h != w.Node {
				t.Errorf("PV %s of claim %s has affinity to %q, want %q", pv.Name, w.claims[r.role].Name, h, w.Node)
			}
		}
		// A marker in every filesystem volume that must survive.
		for _, role := range []string{"keep-delete", "keep-retain", "release-retain", "dropped"} {
			_, dir, err := w.Vols.Locate(ctx, id(w, role))
			if err != nil {
				t.Fatalf("node %s, claim %s: %v", w.Node, role, err)
			}
			if err := os.WriteFile(filepath.Join(dir, markerName), []byte(w.Node), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, role := range []string{"release-delete", "release-block", "release-retain", "dropped"} {
		for _, w := range nodes {
			if err := a.Client.CoreV1().PersistentVolumeClaims(a.NS).Delete(ctx, w.claims[role].Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, w := range nodes {
		name := id(w, "dropped")
		controllertest.Eventually(t, 60*time.Second, "PV "+name+" Released", func() (bool, error) {
			pv, err := a.Client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
			return err == nil && pv.Status.Phase == corev1.VolumeReleased, err
		})
		if err := a.Client.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		w.retained = append(w.retained, name)
	}

	// What each node must end with.
	wantVolumes := func(w *world) []string {
		v := append([]string{id(w, "keep-delete"), id(w, "keep-retain"), id(w, "release-retain")}, w.retained...)
		slices.Sort(v)
		return v
	}
	wantPVs := map[string]string{} // PV name -> node
	for _, w := range nodes {
		for _, role := range []string{"keep-delete", "keep-retain", "release-retain"} {
			wantPVs[id(w, role)] = w.Node
		}
	}
	ourPVs := func() map[string]*corev1.PersistentVolume {
		list, err := a.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]*corev1.PersistentVolume{}
		for i, pv := range list.Items {
			if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == a.NS {
				m[pv.Name] = &list.Items[i]
			}
		}
		return m
	}
	controllertest.Eventually(t, 90*time.Second, "both nodes settled", func() (bool, error) {
		for _, w := range nodes {
			if !slices.Equal(w.VolumeIDs(), wantVolumes(w)) {
				return false, fmt.Errorf("node %s has volumes %v, want %v", w.Node, w.VolumeIDs(), wantVolumes(w))
			}
		}
		if got := ourPVs(); len(got) != len(wantPVs) {
			return false, fmt.Errorf("%d PVs, want %d", len(got), len(wantPVs))
		}
		return true, nil
	})
	time.Sleep(3 * grace) // let a wrong removal happen

	for _, w := range nodes {
		if got := w.VolumeIDs(); !slices.Equal(got, wantVolumes(w)) {
			t.Errorf("node %s has volumes %v, want %v", w.Node, got, wantVolumes(w))
		}
		// Records: exactly the surviving volumes', with their policies.
		wantRecords := map[string]volume.ReclaimPolicy{id(w, "keep-delete"): volume.ReclaimDelete}
		for _, v := range append([]string{id(w, "keep-retain"), id(w, "release-retain")}, w.retained...) {
			wantRecords[v] = volume.ReclaimRetain
		}
		for _, v := range w.quarantined {
			wantRecords[v] = volume.ReclaimDelete
		}
		qs, err := w.Vols.Quarantined(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var inQuarantine []string
		for _, q := range qs {
			inQuarantine = append(inQuarantine, q.ID)
		}
		if !slices.Equal(inQuarantine, slices.Sorted(slices.Values(w.quarantined))) {
			t.Errorf("node %s has in quarantine %v, want %v", w.Node, inQuarantine, w.quarantined)
		}
		ents, err := os.ReadDir(w.Vols.Data.State.Records.FullPath())
		if err != nil {
			t.Fatal(err)
		}
		var recs []string
		for _, en := range ents {
			recs = append(recs, en.Name())
		}
		if !slices.Equal(recs, slices.Sorted(maps.Keys(wantRecords))) {
			t.Errorf("node %s has records %v, want %v", w.Node, recs, slices.Sorted(maps.Keys(wantRecords)))
		}
		for v, want := range wantRecords {
			if got, err := w.Vols.ReclaimPolicy(ctx, v); got != want || err != nil {
				t.Errorf("node %s: volume %s recorded %q (%v), want %q", w.Node, v, got, err, want)
			}
		}
		for _, role := range []string{"keep-delete", "keep-retain", "release-retain", "dropped"} {
			_, dir, err := w.Vols.Locate(ctx, id(w, role))
			if b, rerr := os.ReadFile(filepath.Join(dir, markerName)); err != nil || rerr != nil || string(b) != w.Node {
				t.Errorf("node %s: marker in volume of claim %s missing or changed (%v, %v)", w.Node, role, err, rerr)
			}
		}
	}
	// PVs: the ones kept, each naming the node that holds its volume.
	for name, pv := range ourPVs() {
		node, ok := wantPVs[name]
		if !ok {
			t.Errorf("PV %s (%s) should be gone", name, pv.Status.Phase)
			continue
		}
		if h, _ := ownership.AffinityHostname(pv); h != node || pv.Labels[ownership.LabelNode] != ownership.NodeLabelValue(node) {
			t.Errorf("PV %s: affinity %q, label %q; want node %s", name, h, pv.Labels[ownership.LabelNode], node)
		}
		for _, w := range nodes {
			if has := slices.Contains(w.VolumeIDs(), name); has != (w.Node == node) {
				t.Errorf("PV %s of node %s: its volume on node %s: %v", name, node, w.Node, has)
			}
		}
	}
	for _, w := range nodes {
		checkNodeActs(t, w.env, w.removed, w.retained, w.quarantined, w.claims)
	}
}

// checkNodeActs checks from the outside what node e did: the Events on its
// Node report the removal of exactly the orphans in removed, the keeping
// of those in retained and the quarantine of those in quarantined, every Event it sent about a deletion is
// about its own volumes, and (from the API server's audit log) every PV
// or claim it named in a call is one of its own.
func checkNodeActs(t *testing.T, e *env, removed, retained, quarantined []string, claims map[string]*corev1.PersistentVolumeClaim) {
	t.Helper()
	own := map[string]bool{}
	ownClaims := map[string]bool{}
	for _, pvc := range claims {
		own[ownership.VolumeIDFor(pvc.UID)] = true
		ownClaims[pvc.Name] = true
	}
	for _, id := range slices.Concat(removed, retained, quarantined) {
		own[id] = true
	}
	var gotRemoved, gotRetained, gotQuarantined []string
	for _, ev := range e.Events(types.UID(e.Node)) {
		if ev.Source.Host != e.Node {
			t.Errorf("Event on node %s from %q: %s", e.Node, ev.Source.Host, ev.Message)
		}
		switch ev.Reason {
		case ReasonOrphanDeleted:
			gotRemoved = append(gotRemoved, volumeIn(ev.Message))
		case ReasonOrphanRetained:
			gotRetained = append(gotRetained, volumeIn(ev.Message))
		case ReasonOrphanQuarantined:
			gotQuarantined = append(gotQuarantined, volumeIn(ev.Message))
		}
	}
	for what, c := range map[string][2][]string{"removed": {gotRemoved, removed}, "kept": {gotRetained, retained}, "quarantined": {gotQuarantined, quarantined}} {
		got, want := slices.Sorted(slices.Values(c[0])), slices.Sorted(slices.Values(c[1]))
		if !slices.Equal(got, want) {
			t.Errorf("node %s reports orphans %s: %v, want %v", e.Node, what, got, want)
		}
	}
	list, err := e.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range list.Items {
		obj := ev.InvolvedObject
		if ev.Source.Host == e.Node && ((obj.Kind == "PersistentVolume" && !own[obj.Name]) || (obj.Kind == "PersistentVolumeClaim" && !ownClaims[obj.Name])) {
			t.Errorf("node %s sent an Event about %s %s, not its own: %s %s", e.Node, obj.Kind, obj.Name, ev.Reason, ev.Message)
		}
	}
	calls := controllertest.NodeCalls(t, e.Node)
	if len(calls) == 0 {
		t.Fatalf("no API calls of node %s in the audit log", e.Node)
	}
	for _, c := range calls {
		ref := c.ObjectRef
		if ref == nil || ref.Name == "" {
			continue
		}
		switch {
		case ref.Resource == "persistentvolumes" && !own[ref.Name]:
			t.Errorf("node %s: %s of PV %s, which is not its own", e.Node, c.Verb, ref.Name)
		case ref.Resource == "persistentvolumeclaims" && !ownClaims[ref.Name]:
			t.Errorf("node %s: %s of claim %s/%s, which is not its own", e.Node, c.Verb, ref.Namespace, ref.Name)
		}
	}
}

// volumeIn returns the first volume ID a message names.
func volumeIn(msg string) string {
	for _, f := range strings.Fields(msg) {
		if strings.HasPrefix(f, "pvc-") {
			return f
		}
	}
	return ""
}

// TestOrphans: volumes nothing refers to are removed after the grace
// period; volumes a claim or PV refers to, and things that are not our
// volumes, are kept.
func TestOrphans(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	mkvol := func(id string) {
		t.Helper()
		if _, err := e.Vols.Create(ctx, id, volume.Filesystem, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	// An orphan: its claim was deleted before its PV was created.
	orphan := ownership.VolumeIDFor(uuid.NewUUID())
	mkvol(orphan)
	// A volume whose claim still waits (its class does not exist yet).
	pending := e.CreateClaim(controllertest.Claim{Name: "pending", Class: "not-yet"})
	mkvol(ownership.VolumeIDFor(pending.UID))
	// A volume with a PV but no claim (Retain after the claim went away),
	// and one whose PV lost our label (the informer does not see it).
	retained, unlabelled := ownership.VolumeIDFor(uuid.NewUUID()), ownership.VolumeIDFor(uuid.NewUUID())
	for _, id := range []string{retained, unlabelled} {
		mkvol(id)
		pv := buildPV(e.ClaimObject(controllertest.Claim{Name: "gone"}), &request{id: id, class: testClass(), size: resource.MustParse("1Mi"),
			reclaim: corev1.PersistentVolumeReclaimRetain, mode: corev1.PersistentVolumeFilesystem}, names.DriverName, e.Node, e.Node)
		if id == unlabelled {
			pv.Labels = nil
		}
		if _, err := e.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Client.CoreV1().PersistentVolumes().Delete(ctx, id, metav1.DeleteOptions{}) })
	}
	// Not ours: a stray file in the volumes directory.
	stray := filepath.Join(e.Vols.Data.Volumes.FullPath(), "README")
	if err := os.WriteFile(stray, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}

	c := e.controller()
	c.OrphanGracePeriod = 2 * time.Second
	start := time.Now()
	e.start(c)
	controllertest.Eventually(t, 30*time.Second, "orphan removed", func() (bool, error) {
		return !slices.Contains(e.VolumeIDs(), orphan), nil
	})
	if waited := time.Since(start); waited < c.OrphanGracePeriod {
		t.Errorf("orphan removed after %s, before the grace period of %s", waited, c.OrphanGracePeriod)
	}
	e.WaitEvent(types.UID(e.Node), ReasonOrphanDeleted, orphan)
	time.Sleep(2 * c.OrphanGracePeriod) // let a wrong removal happen
	got := e.VolumeIDs()
	for _, id := range []string{ownership.VolumeIDFor(pending.UID), retained, unlabelled} {
		if !slices.Contains(got, id) {
			t.Errorf("volume %s was removed although something refers to it", id)
		}
	}
	if !controllertest.FileExists(stray) {
		t.Error("stray file in the volumes directory was removed")
	}
}

// TestRestartStartsClean: the supervisor restarts a failed controller by
// calling Run again on the same Controller; the new incarnation builds its
// own informers and queues and works (claims made while it was down are
// provisioned, released volumes deleted).
func TestRestartStartsClean(t *testing.T) {
	e := newEnv(t, true)
	c := e.newController(e.controller())
	var runs atomic.Int32
	crash := make(chan struct{})
	supervisor.TestHarness(t, func(ctx context.Context) error {
		if runs.Add(1) == 1 {
			cctx, cancel := context.WithCancel(ctx)
			go func() {
				select {
				case <-crash:
				case <-ctx.Done():
				}
				cancel()
			}()
			_ = c.Run(cctx)
			return errors.New("simulated crash")
		}
		return c.Run(ctx)
	}, supervisor.WithBackoff(time.Second, time.Second))
	first := e.CreateClaim(controllertest.Claim{Name: "first"})
	e.WaitBound("first")
	close(crash)
	controllertest.Eventually(t, 10*time.Second, "controller restarted", func() (bool, error) { return runs.Load() >= 2, nil })
	e.CreateClaim(controllertest.Claim{Name: "second"})
	e.WaitBound("second")
	if err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Delete(context.Background(), first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 60*time.Second, "first volume deleted", func() (bool, error) {
		_, err := e.Client.CoreV1().PersistentVolumes().Get(context.Background(), ownership.VolumeIDFor(first.UID), metav1.GetOptions{})
		return apierrors.IsNotFound(err) && !slices.Contains(e.VolumeIDs(), ownership.VolumeIDFor(first.UID)), nil
	})
}

// TestBackoffHoldsAgainstUpdates: a claim that keeps failing (its
// StorageClass does not exist yet) is retried with growing delays, however
// often the claim is updated. (A claim this node has no room for is not
// retried here at all: it is handed back, TestHandedBackFromAFullNode.)
func TestBackoffHoldsAgainstUpdates(t *testing.T) {
	e := newEnv(t, true)
	c := e.controller()
	c.RetryBase, c.RetryMax = time.Second, time.Minute
	e.start(c)
	pvc := e.CreateClaim(controllertest.Claim{Name: "classless", Class: e.Class + "-later"})
	const ours = "it is used as soon as it is created" // the PV controller says "not found" too
	e.WaitEvent(pvc.UID, ReasonProvisioningFailed, ours)
	// 40 updates over 4 s. Without backoff each would be an attempt; with
	// it, attempts come after 1, 2 (and 4) s: at most 4 in this window.
	ctx := context.Background()
	for i := range 40 {
		p, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels["touch"] = fmt.Sprint(i)
		if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.NS).Update(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	countAttempts := func() int {
		n := 0
		for _, ev := range e.Events(pvc.UID) {
			if ev.Reason == ReasonProvisioningFailed && strings.Contains(ev.Message, ours) {
				n += int(ev.Count)
			}
		}
		return n
	}
	// Events are sent asynchronously; wait for the retries to show.
	controllertest.Eventually(t, 10*time.Second, "a retry's Event", func() (bool, error) { return countAttempts() >= 2, nil })
	attempts := countAttempts()
	if attempts < 2 || attempts > 5 {
		t.Errorf("%d provisioning attempts in ~5 s of updates; want 2..5 (exponential backoff from 1 s)", attempts)
	}
}
