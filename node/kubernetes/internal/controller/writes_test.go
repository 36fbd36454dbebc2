package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

func pv(name, rv string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
}

// TestOwnWritesSeenUntilStoreCatchesUp: a remembered write is what Get
// returns while the store lacks the object or holds an older version, and
// the store's copy wins as soon as it is as new or newer.
func TestOwnWritesSeenUntilStoreCatchesUp(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	clk := clocktesting.NewFakeClock(time.Now())
	w := NewOwnWrites[*corev1.PersistentVolume](store, clk, time.Minute)

	if _, ok := w.Get("a"); ok {
		t.Fatal("Get of an unknown key found something")
	}
	w.Remember(pv("a", "5"))
	if got, ok := w.Get("a"); !ok || got.ResourceVersion != "5" {
		t.Fatalf("before the watch: got %v, %v; want the remembered write (rv 5)", got, ok)
	}
	_ = store.Add(pv("a", "4"))
	if got, _ := w.Get("a"); got.ResourceVersion != "5" {
		t.Fatalf("store behind the write: got rv %s, want 5", got.ResourceVersion)
	}
	// An older read must not replace a newer remembered write.
	w.Remember(pv("a", "3"))
	if got, _ := w.Get("a"); got.ResourceVersion != "5" {
		t.Fatalf("after remembering an older copy: got rv %s, want 5", got.ResourceVersion)
	}
	_ = store.Update(pv("a", "7"))
	if got, _ := w.Get("a"); got.ResourceVersion != "7" {
		t.Fatalf("store ahead of the write: got rv %s, want 7", got.ResourceVersion)
	}
}

// TestOwnWritesForgottenAfterTTL: a write the watch never confirms (the
// object was deleted at once) stops being returned after the TTL.
func TestOwnWritesForgottenAfterTTL(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	clk := clocktesting.NewFakeClock(time.Now())
	w := NewOwnWrites[*corev1.PersistentVolume](store, clk, time.Minute)
	w.Remember(pv("a", "5"))
	clk.Step(2 * time.Minute)
	if _, ok := w.Get("a"); ok {
		t.Fatal("a write past its TTL is still returned")
	}
}
