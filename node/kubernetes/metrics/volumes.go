package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"source.plinth.dev/node/core/volume"
)

// scrapeTimeout bounds the volume listing of one scrape.
const scrapeTimeout = 10 * time.Second

// VolumeCollector reports the data filesystem and the volumes on it,
// measured at scrape time (a directory listing, one stat per volume and a
// statfs), so the numbers are never stale and nothing has to keep them up
// to date. Register it for as long as its Manager is the node's.
type VolumeCollector struct {
	vols *volume.Manager

	size, avail, allocated, count, leftovers, quarantined *prometheus.Desc
}

// NewVolumeCollector returns a collector over vols.
func NewVolumeCollector(vols *volume.Manager) *VolumeCollector {
	return &VolumeCollector{
		vols: vols,
		// size and avail are the data filesystem's statfs figures:
		// its total size and the bytes still free to unprivileged
		// writers.
		size: prometheus.NewDesc(Namespace+"_data_filesystem_size_bytes",
			"Size of the data filesystem that holds the volumes.", nil, nil),
		avail: prometheus.NewDesc(Namespace+"_data_filesystem_available_bytes",
			"Free bytes on the data filesystem (statfs f_bavail), before subtracting what filesystem volumes may still fill.", nil, nil),
		// allocated is the capacity promised to volumes: the quota of a
		// filesystem volume, the size of a block volume's image.
		allocated: prometheus.NewDesc(Namespace+"_volumes_allocated_bytes",
			"Capacity of the volumes on the node, by mode (filesystem: quota size; block: image size).", []string{"mode"}, nil),
		count: prometheus.NewDesc(Namespace+"_volumes",
			"Volumes on the node, by mode.", []string{"mode"}, nil),
		// leftovers are entries that are not complete volumes: an
		// operation interrupted by a crash (settled at the next start),
		// or a file the node does not recognise (left to the operator).
		leftovers: prometheus.NewDesc(Namespace+"_volume_leftovers",
			"Entries in the volumes directory that are not complete volumes (interrupted operations, unknown files).", nil, nil),
		// quarantined lists the volumes whose Delete PV vanished, one
		// series each (they are few, and each is data an operator may
		// want back): an alert on its presence catches a restore gone
		// wrong within the retention.
		quarantined: prometheus.NewDesc(Namespace+"_volume_quarantined_since_seconds",
			"Volumes in quarantine (their Delete PV vanished), by volume ID and mode: the Unix time they were moved there (0 if unknown).", []string{"volume", "mode"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *VolumeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.size, c.avail, c.allocated, c.count, c.leftovers, c.quarantined} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A failure is reported as an
// invalid metric, which the scrape shows as an error beside the other
// metrics.
func (c *VolumeCollector) Collect(ch chan<- prometheus.Metric) {
	var st unix.Statfs_t
	if err := unix.Statfs(c.vols.Data.Volumes.FullPath(), &st); err != nil {
		ch <- prometheus.NewInvalidMetric(c.size, fmt.Errorf("statfs of the data filesystem: %w", err))
	} else {
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(st.Blocks)*float64(st.Bsize))
		ch <- prometheus.MustNewConstMetric(c.avail, prometheus.GaugeValue, float64(st.Bavail)*float64(st.Bsize))
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	entries, err := c.vols.List(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.count, err)
		return
	}
	s := Summarize(entries)
	for _, mode := range []volume.Mode{volume.Filesystem, volume.Block} {
		ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(s.Count[mode]), mode.String())
		ch <- prometheus.MustNewConstMetric(c.allocated, prometheus.GaugeValue, float64(s.Allocated[mode]), mode.String())
	}
	ch <- prometheus.MustNewConstMetric(c.leftovers, prometheus.GaugeValue, float64(s.Leftovers))
	qs, err := c.vols.Quarantined(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.quarantined, err)
		return
	}
	for _, q := range qs {
		since := 0.0
		if !q.Since.IsZero() {
			since = float64(q.Since.Unix())
		}
		ch <- prometheus.MustNewConstMetric(c.quarantined, prometheus.GaugeValue, since, q.ID, q.Mode.String())
	}
}

// Summary is what the volume metrics say about a listing.
type Summary struct {
	Count     map[volume.Mode]int
	Allocated map[volume.Mode]int64
	Leftovers int
}

// Summarize counts complete volumes and their capacity by mode; entries
// with a pending operation or a problem are leftovers.
func Summarize(entries []volume.Entry) Summary {
	s := Summary{Count: map[volume.Mode]int{}, Allocated: map[volume.Mode]int64{}}
	for _, e := range entries {
		if e.Pending != "" || e.Problem != "" {
			s.Leftovers++
			continue
		}
		s.Count[e.Mode]++
		s.Allocated[e.Mode] += e.CapacityBytes
	}
	return s
}
