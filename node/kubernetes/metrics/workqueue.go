package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// queueMetrics are client-go's work queue metrics, labelled by queue name
// ("name"), with the names client-go's own controllers use under
// "workqueue_", prefixed here with the namespace.
//
// client-go (v0.34) takes the provider per queue, in the queue's config
// (TypedQueueConfig.MetricsProvider, TypedDelayingQueueConfig
// .MetricsProvider): Metrics.WorkqueueProvider is passed there and
// workqueue.SetProvider, the process-wide fallback, is never called. The
// controllers build a new queue each time the supervisor restarts them;
// the new queue gets the same label values, so its counters continue the
// old ones.
type queueMetrics struct {
	// depth is the number of keys waiting in each queue now.
	depth *prometheus.GaugeVec
	// adds counts keys added to each queue.
	adds *prometheus.CounterVec
	// latency is how long keys waited in each queue before a worker took
	// them.
	latency *prometheus.HistogramVec
	// workDuration is how long a worker took for each key.
	workDuration *prometheus.HistogramVec
	// unfinished is the work in progress, in seconds summed over keys.
	unfinished *prometheus.GaugeVec
	// longest is how long the longest-running worker has been at its key.
	longest *prometheus.GaugeVec
	// retries counts keys put back with a delay: a retry after a failure,
	// or a key taken before its backoff ended and put back for the rest
	// (controller.BackoffQueue).
	retries *prometheus.CounterVec
}

func newQueueMetrics() queueMetrics {
	name := []string{"name"}
	buckets := prometheus.ExponentialBuckets(0.0001, 4, 10) // 100µs to ~26s
	return queueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "depth",
			Help: "Keys waiting in the work queue now."}, name),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "adds_total",
			Help: "Keys added to the work queue."}, name),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "queue_duration_seconds",
			Help: "How long a key waited in the work queue before a worker took it.", Buckets: buckets}, name),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "work_duration_seconds",
			Help: "How long a worker took to process a key.", Buckets: buckets}, name),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "unfinished_work_seconds",
			Help: "Seconds of work in progress, summed over the keys being processed; growth means stuck workers."}, name),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "longest_running_processor_seconds",
			Help: "How long the longest-running worker has been processing its key."}, name),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "retries_total",
			Help: "Keys put back into the work queue with a delay (retries after failures, and keys whose backoff had not ended)."}, name),
	}
}

func (q queueMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{q.depth, q.adds, q.latency, q.workDuration, q.unfinished, q.longest, q.retries}
}

// WorkqueueProvider is the provider to put in a work queue's config. A nil
// Metrics gives nil, which client-go treats as "no provider given".
func (m *Metrics) WorkqueueProvider() workqueue.MetricsProvider {
	if m == nil {
		return nil
	}
	return queueProvider{m.queues}
}

type queueProvider struct{ q queueMetrics }

// NewDepthMetric starts the depth of name at zero: a new queue is empty,
// and one queue per name lives at a time (a restarted controller's old
// queue is shut down first), so keys the old queue held when it stopped
// must not stay counted.
func (p queueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	g := p.q.depth.WithLabelValues(name)
	g.Set(0)
	return g
}
func (p queueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.q.adds.WithLabelValues(name)
}
func (p queueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.q.latency.WithLabelValues(name)
}
func (p queueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.q.workDuration.WithLabelValues(name)
}
func (p queueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.q.unfinished.WithLabelValues(name)
}
func (p queueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.q.longest.WithLabelValues(name)
}
func (p queueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.q.retries.WithLabelValues(name)
}
