// Package volumehealth watches the condition of this node's volumes and
// tells their users: a Warning Event on the claim and its PV when a
// volume turns abnormal (its directory or image gone, its quota missing,
// its loop device detached or serving another file), and a Normal Event
// when it is healthy again.
//
// The CSI plugin already finds these problems when asked
// (NodeGetVolumeHealth, and the condition in NodeGetVolumeStats), but
// nobody asks unless the kubelet's alpha CSIVolumeHealth gate is on, and
// even then it reports on pods, not on the claim a user looks at. For a
// node-local volume the node is the only place the damage can be seen, so
// plinth-node looks itself, at an interval, and reports where `kubectl
// describe pvc` shows it.
package volumehealth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	"source.plinth.dev/node/kubernetes/internal/controller"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/supervisor"
)

// Event reasons: the kubelet's own words for a volume condition (it uses
// them on pods), so that alerts on either match both.
const (
	ReasonAbnormal = "VolumeConditionAbnormal"
	ReasonNormal   = "VolumeConditionNormal"
)

// DefaultInterval is the default of Config.Interval: damage is reported
// within a minute, and a node with a thousand volumes spends a few
// milliseconds a second on the checks (each is a stat and a quotactl, plus
// a look at the loop devices of its publications).
const DefaultInterval = time.Minute

// Condition is what a check found.
type Condition struct {
	Abnormal bool
	// Message says what is wrong; empty for a healthy volume.
	Message string
}

// Checker checks one volume of this node.
type Checker interface {
	Check(ctx context.Context, volumeID string) (Condition, error)
}

// CSI is a Checker that asks a CSI node plugin (NodeGetVolumeHealth, all
// publications of the volume) through its socket, as the kubelet does: the
// monitor and the plugin are separate runnables of the node, and the
// plugin's own locks keep a check from mistaking a publication being made
// for a broken one. A volume the plugin does not find is abnormal: the
// monitor only asks about bound PVs, whose volume must exist.
func CSI(c csi.NodeClient) Checker { return csiChecker{c} }

type csiChecker struct{ c csi.NodeClient }

func (c csiChecker) Check(ctx context.Context, id string) (Condition, error) {
	resp, err := c.c.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: id})
	if status.Code(err) == codes.NotFound {
		return Condition{Abnormal: true, Message: "the volume's data is gone: " + status.Convert(err).Message()}, nil
	}
	if err != nil {
		return Condition{}, fmt.Errorf("checking volume %s: %w", id, err)
	}
	var msgs []string
	for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
		msgs = append(msgs, fmt.Sprintf("%s: %s", h.GetReason(), h.GetMessage()))
	}
	return Condition{Abnormal: len(msgs) > 0, Message: strings.Join(msgs, "; ")}, nil
}

// Config is what a Monitor needs: the fields every controller has (Client,
// Driver and NodeName required), and the Checker.
type Config struct {
	controller.Base
	Checker Checker
	// Interval is the time between two checks of every volume.
	Interval time.Duration
	// Auditor, when set, walks every bound filesystem volume every
	// AuditInterval, at most AuditRate files a second, puts back in the
	// volume's project quota what its user moved out, and says so in a
	// Warning Event (ReasonQuotaRestored). Zero AuditInterval and
	// AuditRate are the defaults.
	Auditor       Auditor
	AuditInterval time.Duration
	AuditRate     int
}

// Monitor is the volume health runnable: build it with New, then pass Run
// to the supervisor.
type Monitor struct {
	Config
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Monitor, error) {
	if err := cfg.Complete("volume health monitor"); err != nil {
		return nil, err
	}
	if cfg.Checker == nil {
		return nil, errors.New("creating volume health monitor: no checker")
	}
	if cfg.Interval < 0 || cfg.AuditInterval < 0 || cfg.AuditRate < 0 {
		return nil, errors.New("creating volume health monitor: negative interval or audit rate")
	}
	cfg.Interval = controller.OrDefault(cfg.Interval, DefaultInterval)
	cfg.AuditInterval = controller.OrDefault(cfg.AuditInterval, DefaultAuditInterval)
	cfg.AuditRate = controller.OrDefault(cfg.AuditRate, DefaultAuditRate)
	return &Monitor{Config: cfg}, nil
}

// Run checks this node's bound volumes every Interval, and audits them
// every AuditInterval when there is an Auditor, until ctx ends. What it
// last found is kept in memory only: after a restart, a volume still
// abnormal is reported once more, which the API server folds into the
// earlier Event.
func (m *Monitor) Run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	factory := m.NodeInformers()
	volumes := factory.Core().V1().PersistentVolumes()
	volumes.Informer() // registered before Start
	recorder, stopEvents := controller.NewRecorder(ctx, m.EventClient, m.Driver, m.NodeName)
	defer stopEvents()
	stop, err := controller.StartInformers(ctx, factory)
	defer stop()
	if err != nil {
		return err
	}
	r := &round{Monitor: m, log: log, recorder: recorder, lister: volumes.Lister(), last: map[string]Condition{}}
	tasks := []func(context.Context){controller.Every(m.Clock, m.Interval, r.checkAll)}
	if m.Auditor != nil {
		a := &audit{round: r, limiter: rate.NewLimiter(rate.Limit(m.AuditRate), max(m.AuditRate/10, 1)), incomplete: map[string]string{}}
		tasks = append(tasks, controller.Every(m.Clock, m.AuditInterval, a.auditAll), a.reportRepairs)
	}
	return controller.Loops{Tasks: tasks}.Run(ctx)
}

// round is the state of one run of the monitor.
type round struct {
	*Monitor
	log      logtree.LeveledLogger
	recorder record.EventRecorder
	lister   corelisters.PersistentVolumeLister
	// last is the condition each PV's volume had at its last check.
	last map[string]Condition
}

// checkAll checks every bound volume of this node and reports the changes.
func (r *round) checkAll(ctx context.Context) {
	pvs := r.watchedPVs()
	for _, pv := range pvs {
		cond, err := r.Checker.Check(ctx, pv.Spec.CSI.VolumeHandle)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warningf("PV %s: %v", pv.Name, err)
			}
			continue
		}
		r.report(pv, cond)
	}
	forgetOthers(r.last, pvs)
	r.Metrics.VolumesAbnormal(r.abnormal())
}

// abnormal counts the volumes whose last check found them abnormal.
func (r *round) abnormal() int {
	n := 0
	for _, c := range r.last {
		if c.Abnormal {
			n++
		}
	}
	return n
}

// watchedPVs lists the PVs of this node's volumes in use (watched), or
// none when the list fails, which it logs.
func (r *round) watchedPVs() []*corev1.PersistentVolume {
	pvs, err := r.lister.List(labels.Everything())
	if err != nil {
		r.log.Warningf("listing this node's PVs: %v", err)
		return nil
	}
	var out []*corev1.PersistentVolume
	for _, pv := range pvs {
		if r.watched(pv) {
			out = append(out, pv)
		}
	}
	return out
}

// forgetOthers drops from last, a finding per PV name, the PVs not in
// pvs: released or gone since.
func forgetOthers[V any](last map[string]V, pvs []*corev1.PersistentVolume) {
	seen := map[string]bool{}
	for _, pv := range pvs {
		seen[pv.Name] = true
	}
	for name := range last {
		if !seen[name] {
			delete(last, name)
		}
	}
}

// watched says whether pv is a volume of ours in use: bound to a claim.
// Released volumes are on their way out and not checked.
func (r *round) watched(pv *corev1.PersistentVolume) bool {
	return pv.Spec.CSI != nil && pv.Spec.CSI.Driver == r.Driver &&
		pv.Status.Phase == corev1.VolumeBound && pv.Spec.ClaimRef != nil &&
		pv.DeletionTimestamp == nil
}

// report sends Events for a change of pv's condition: a volume seen
// abnormal for the first time, or with a different problem, and one
// healthy again.
func (r *round) report(pv *corev1.PersistentVolume, cond Condition) {
	prev, known := r.last[pv.Name]
	r.last[pv.Name] = cond
	claim := pv.Spec.ClaimRef
	switch {
	case cond.Abnormal && (!known || prev != cond):
		r.log.Warningf("volume %s of claim %s/%s is abnormal: %s", pv.Spec.CSI.VolumeHandle, claim.Namespace, claim.Name, cond.Message)
		r.tell(pv, corev1.EventTypeWarning, ReasonAbnormal,
			fmt.Sprintf("volume %s on node %s is abnormal: %s", pv.Spec.CSI.VolumeHandle, r.NodeName, cond.Message))
	case !cond.Abnormal && known && prev.Abnormal:
		r.log.Infof("volume %s of claim %s/%s is healthy again", pv.Spec.CSI.VolumeHandle, claim.Namespace, claim.Name)
		r.tell(pv, corev1.EventTypeNormal, ReasonNormal,
			fmt.Sprintf("volume %s on node %s is healthy again", pv.Spec.CSI.VolumeHandle, r.NodeName))
	}
}

// tell sends an Event about pv's volume to its claim, where users look,
// and to the PV.
func (r *round) tell(pv *corev1.PersistentVolume, eventType, reason, msg string) {
	for _, obj := range []*corev1.ObjectReference{pv.Spec.ClaimRef, ref(pv)} {
		r.recorder.Event(obj, eventType, reason, msg)
	}
}

func ref(pv *corev1.PersistentVolume) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "PersistentVolume", APIVersion: "v1", Name: pv.Name, UID: pv.UID}
}
