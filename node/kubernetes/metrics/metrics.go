// Package metrics defines every Prometheus metric plinth-node exports, in
// one place, so that an operator reading this file knows the whole
// vocabulary and a reviewer sees at once what each number counts.
//
// There are no package-level collectors and nothing is registered with
// client_golang's default registry: New registers the metrics with the
// registry its caller passes (node/cmd/plinth-node makes one per process)
// and returns them as a value that the node hands down to its parts. A nil
// *Metrics is valid everywhere and records nothing, so code paths and tests
// without an endpoint need no special case.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"source.plinth.dev/node/core/volume"
)

// Namespace prefixes every metric name.
const Namespace = "plinth"

// Operation names a kind of volume work; it is the "operation" label.
type Operation string

// The operations counted. A CSI call and a controller's attempt at the
// same work count under the same name: provision is both the standalone
// plugin's CreateVolume and the provisioner creating a claim's volume and
// PV.
const (
	Provision Operation = "provision"
	Delete    Operation = "delete"
	Resize    Operation = "resize"
	Publish   Operation = "publish"
	Unpublish Operation = "unpublish"
	Stats     Operation = "stats"
	// Snapshot is making a volume's snapshot (CSI CreateSnapshot, or the
	// node's work on a VolumeSnapshotContent); SnapshotDelete is
	// deleting one. A restore or clone is a Provision.
	Snapshot       Operation = "snapshot"
	SnapshotDelete Operation = "snapshot_delete"
	// Audit is one walk of a filesystem volume by the quota audit
	// (volumehealth), paced, so it lasts as long as the volume's files
	// take at the node's audit rate.
	Audit Operation = "audit"
)

// Metrics are plinth-node's metrics, registered with one registry.
type Metrics struct {
	// operationSeconds counts every attempt at an operation (its _count)
	// and how long it took, failed attempts included.
	operationSeconds *prometheus.HistogramVec
	// operationErrors counts failed attempts by operation and code: the
	// gRPC code name for CSI calls (e.g. "NotFound"), a reason for
	// controller work (see Reason).
	operationErrors *prometheus.CounterVec
	// restarts counts restarts of each supervised runnable, by its name
	// in the tree (e.g. "root.kubernetes.provisioner").
	restarts *prometheus.CounterVec
	// restored counts what the quota audit found outside its volume's
	// project quota and put back: files and directories, and the bytes
	// they held. Any increase means a process moved part of its volume
	// out of the volume's size.
	restoredEntries, restoredBytes prometheus.Counter
	// releasedEntries and releasedBytes count what the quota watch
	// took out of volumes' project quotas outside every volume.
	releasedEntries, releasedBytes prometheus.Counter
	// abnormal is how many bound volumes the last health check found
	// abnormal: the count behind the VolumeConditionAbnormal Events.
	abnormal prometheus.Gauge
	queues   queueMetrics

	// reg is where New registered the metrics, and where WatchVolumes
	// registers a volume collector.
	reg prometheus.Registerer
}

// New creates the metrics and registers them with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		operationSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "operation_duration_seconds",
			Help:      "Duration of volume operations (provision, delete, resize, publish, unpublish, stats, audit), failed ones included; _count is the number of attempts.",
			// 1 ms to about 17 minutes: a publish takes milliseconds, a
			// provision behind a busy API server seconds, and an audit
			// walk, paced at 2,000 files a second, a minute per 120,000
			// files.
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 11),
		}, []string{"operation"}),
		operationErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "operation_errors_total",
			Help:      "Failed volume operations, by gRPC code (CSI calls) or reason (controller work).",
		}, []string{"operation", "code"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "supervisor_restarts_total",
			Help:      "Restarts of each supervised runnable after it failed, by its name in the supervision tree.",
		}, []string{"runnable"}),
		restoredEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "quota_audit_restored_entries_total",
			Help:      "Files and directories the quota audit found moved out of their volume's project quota, and put back.",
		}),
		restoredBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "quota_audit_restored_bytes_total",
			Help:      "Bytes held by the files the quota audit put back in their volume's project quota, which had not counted against the volume's size.",
		}),
		releasedEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "quota_watch_released_entries_total",
			Help:      "Files and directories outside every volume that the quota watch found moved into a volume's project quota, and took out of it.",
		}),
		releasedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "quota_watch_released_bytes_total",
			Help:      "Bytes held by the files outside every volume that the quota watch took out of a volume's project quota, which had counted against that volume's size.",
		}),
		abnormal: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "volumes_abnormal",
			Help:      "Bound volumes of this node that the last health check found abnormal (data gone, quota changed, publication broken); each has a VolumeConditionAbnormal Event on its claim.",
		}),
		queues: newQueueMetrics(),
		reg:    reg,
	}
	cs := []prometheus.Collector{m.operationSeconds, m.operationErrors, m.restarts, m.restoredEntries, m.restoredBytes, m.releasedEntries, m.releasedBytes, m.abnormal}
	cs = append(cs, m.queues.collectors()...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return m, nil
}

// Observe records one attempt at op that began at start; code is "" for a
// success, else the gRPC code name or reason of the failure.
func (m *Metrics) Observe(op Operation, start time.Time, code string) {
	if m == nil {
		return
	}
	m.operationSeconds.WithLabelValues(string(op)).Observe(time.Since(start).Seconds())
	if code != "" {
		m.operationErrors.WithLabelValues(string(op), code).Inc()
	}
}

// QuotaRestored counts what one walk of the quota audit put back in its
// volume's project quota: entries files and directories holding bytes.
func (m *Metrics) QuotaRestored(entries, bytes int64) {
	if m == nil {
		return
	}
	m.restoredEntries.Add(float64(entries))
	m.restoredBytes.Add(float64(bytes))
}

// QuotaReleased counts what the quota watch took out of volumes' project
// quotas outside every volume: entries files and directories holding
// bytes.
func (m *Metrics) QuotaReleased(entries, bytes int64) {
	if m == nil {
		return
	}
	m.releasedEntries.Add(float64(entries))
	m.releasedBytes.Add(float64(bytes))
}

// VolumesAbnormal records how many bound volumes the last health check
// found abnormal.
func (m *Metrics) VolumesAbnormal(n int) {
	if m == nil {
		return
	}
	m.abnormal.Set(float64(n))
}

// Restarted counts a restart of the runnable named dn. It is the
// supervisor's restart hook (supervisor.WithRestartHook).
func (m *Metrics) Restarted(dn string) {
	if m == nil {
		return
	}
	m.restarts.WithLabelValues(dn).Inc()
}

// WatchVolumes registers a VolumeCollector over vols and returns the
// function that unregisters it. The node builds a new volume manager each
// time its Kubernetes service starts; each registers its collector for as
// long as it is the node's. A nil Metrics watches nothing.
func (m *Metrics) WatchVolumes(vols *volume.Manager) (unregister func(), err error) {
	if m == nil {
		return func() {}, nil
	}
	c := NewVolumeCollector(vols)
	if err := m.reg.Register(c); err != nil {
		return nil, fmt.Errorf("registering volume metrics: %w", err)
	}
	return func() { m.reg.Unregister(c) }, nil
}

// Reasons of failed controller work (the "code" label). Each is a
// CamelCase word, like the gRPC codes that CSI calls report in the same
// label.
const (
	ReasonCanceled = "Canceled"
	// ReasonInfeasible: the node cannot do it as asked (no room, no
	// quotas, a conflicting volume; see volume.Infeasible).
	ReasonInfeasible = "Infeasible"
	// ReasonInvalid: the request itself is wrong (a bad claim or class,
	// a PV the API server refuses); an update of the object is needed.
	ReasonInvalid = "Invalid"
	// ReasonAPI: a call to the API server failed.
	ReasonAPI = "APIError"
	// ReasonVolume: the volume layer failed otherwise.
	ReasonVolume = "VolumeError"
)

// Reason classifies err from controller work for the "code" label: ""
// for nil, a gRPC code name for an error carrying one, else one of the
// Reason constants.
func Reason(err error) string {
	var api apierrors.APIStatus
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ReasonCanceled
	case errors.Is(err, volume.ErrInvalid):
		return ReasonInvalid
	case volume.Infeasible(err):
		return ReasonInfeasible
	case errors.As(err, &api):
		return ReasonAPI
	}
	if s, ok := status.FromError(err); ok {
		return s.Code().String()
	}
	return ReasonVolume
}
