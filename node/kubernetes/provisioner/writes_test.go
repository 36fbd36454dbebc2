package provisioner

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/node/kubernetes/internal/ownership"
	"source.plinth.dev/pkg/logtree"
)

// fakeVolumes counts Create calls (a fake is fine here: this is a unit test
// of the controller's bookkeeping, not of volumes).
type fakeVolumes struct {
	mu       sync.Mutex
	creates  int
	deletes  int
	policies map[string]volume.ReclaimPolicy
}

func (f *fakeVolumes) Create(_ context.Context, id string, mode volume.Mode, bytes int64, _ ...volume.CreateOption) (volume.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates++
	return volume.Info{ID: id, Mode: mode, CapacityBytes: bytes}, nil
}
func (f *fakeVolumes) Delete(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes++
	return nil
}
func (f *fakeVolumes) List(context.Context) ([]volume.Entry, error) { return nil, nil }
func (f *fakeVolumes) Space(context.Context) (volume.Space, error) {
	return volume.Space{Free: 1 << 40}, nil
}
func (f *fakeVolumes) Changed() <-chan struct{}          { return nil }
func (f *fakeVolumes) CapacityEnforced() bool            { return true }
func (f *fakeVolumes) UnenforcedCapacity() (error, bool) { return nil, false }
func (f *fakeVolumes) SetReclaimPolicy(_ context.Context, id string, p volume.ReclaimPolicy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.policies == nil {
		f.policies = map[string]volume.ReclaimPolicy{}
	}
	f.policies[id] = p
	return nil
}
func (f *fakeVolumes) ReclaimPolicy(context.Context, string) (volume.ReclaimPolicy, error) {
	return volume.ReclaimUnrecorded, nil
}

// TestOwnWritesSeenBeforeWatch: a claim synced again right after its PV was
// created, before the PV informer has delivered the PV (here: never), is
// recognised as done through the mutation cache: no second volume
// operation, no second API write.
func TestOwnWritesSeenBeforeWatch(t *testing.T) {
	client := fake.NewClientset()
	r, vols, key := unitRun(t, client)
	defer r.claimQ.ShutDown()
	for i := range 3 {
		if err := r.syncClaim(context.Background(), key); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	if vols.creates != 1 {
		t.Errorf("volume created %d times, want 1", vols.creates)
	}
	var writes int
	for _, a := range client.Actions() {
		if a.GetResource().Resource == "persistentvolumes" {
			writes++
		}
	}
	if writes != 1 {
		t.Errorf("%d PV API calls (%v), want exactly the one create", writes, client.Actions())
	}
}

// TestRejectedPVLeavesNoVolume: when the API server refuses the PV for good
// (Invalid), the volume made for it is removed again and the claim gets a
// ProvisioningFailed Event.
func TestRejectedPVLeavesNoVolume(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("create", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolume"}, "x", nil)
	})
	r, vols, key := unitRun(t, client)
	defer r.claimQ.ShutDown()
	if err := r.syncClaim(context.Background(), key); err != nil {
		t.Fatalf("sync: %v (a rejected PV is not worth retrying)", err)
	}
	if vols.creates != 1 || vols.deletes != 1 {
		t.Errorf("volume created %d and deleted %d times, want 1 and 1", vols.creates, vols.deletes)
	}
	select {
	case ev := <-r.recorder.(*record.FakeRecorder).Events:
		if !strings.Contains(ev, ReasonProvisioningFailed) {
			t.Errorf("event %q, want %s", ev, ReasonProvisioningFailed)
		}
	default:
		t.Error("no Event")
	}
}

// unitRun is a run over in-memory caches holding one claim of ours and its
// class, with a PV cache the watch never fills.
func unitRun(t *testing.T, client *fake.Clientset) (*run, *fakeVolumes, string) {
	t.Helper()
	// The cluster's identity, which the provisioner records before it
	// makes a volume.
	if err := client.Tracker().Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metav1.NamespaceSystem, UID: "cluster-uid"}}); err != nil {
		t.Fatal(err)
	}
	claims := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{ownership.UIDIndex: ownership.IndexByUID})
	pvc := testClaim()
	if err := claims.Add(pvc); err != nil {
		t.Fatal(err)
	}
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := classes.Add(testClass()); err != nil {
		t.Fatal(err)
	}
	pvs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}) // the lagging watch
	vols := &fakeVolumes{}
	r := &run{
		Controller: &Controller{Config: Config{Base: controller.Base{Client: client, Driver: testDriver, NodeName: testNode}, Volumes: vols}},
		log:        logtree.New().LeveledFor("test"),
		clock:      clock.RealClock{},
		hostname:   testNode,
		label:      ownership.NodeLabelValue(testNode),
		claimIdx:   claims,
		classes:    storagelisters.NewStorageClassLister(classes),
		volumes:    controller.NewOwnWrites[*corev1.PersistentVolume](pvs, clock.RealClock{}, time.Minute),
		recorder:   record.NewFakeRecorder(10),
		claimQ:     controller.NewBackoffQueue("test", clock.RealClock{}, time.Second, time.Second, nil),
	}
	return r, vols, pvc.Namespace + "/" + pvc.Name
}

// TestMissedDeletionKeepsData: a PV deletion the watch saw records the
// PV's last reclaim policy; one it missed (a tombstone after a relist)
// records Retain whatever the last policy seen, since the policy may have
// changed in the gap, and data is never deleted on a guess.
func TestMissedDeletionKeepsData(t *testing.T) {
	r, vols, _ := unitRun(t, fake.NewClientset())
	pvc := testClaim()
	req := &request{id: ownership.VolumeIDFor(pvc.UID), mode: corev1.PersistentVolumeFilesystem, size: resource.MustParse("1Mi"),
		reclaim: corev1.PersistentVolumeReclaimDelete, class: testClass()}
	pv := buildPV(pvc, req, testDriver, testNode, testNode)
	ctx := context.Background()
	r.onVolumeDeleted(ctx, pv)
	if got := vols.policies[pv.Name]; got != volume.ReclaimDelete {
		t.Errorf("seen deletion of a Delete PV recorded %q, want %q", got, volume.ReclaimDelete)
	}
	r.onVolumeDeleted(ctx, cache.DeletedFinalStateUnknown{Key: pv.Name, Obj: pv})
	if got := vols.policies[pv.Name]; got != volume.ReclaimRetain {
		t.Errorf("missed deletion of a Delete PV recorded %q, want %q", got, volume.ReclaimRetain)
	}
}

func (f *fakeVolumes) Quarantine(context.Context, string, time.Time) error { return nil }
func (f *fakeVolumes) Restore(context.Context, string) error               { return volume.ErrNotFound }
func (f *fakeVolumes) Quarantined(context.Context) ([]volume.QuarantinedVolume, error) {
	return nil, nil
}
func (f *fakeVolumes) DeleteQuarantined(context.Context, string) error { return nil }
func (f *fakeVolumes) ClusterID() (string, error)                      { return "", nil }
func (f *fakeVolumes) RecordCluster(id string) (string, error)         { return id, nil }
