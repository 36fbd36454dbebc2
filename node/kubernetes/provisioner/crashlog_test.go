package provisioner

// What the crash tests read from plinth-node's log: when a start's
// provisioner runs, and what the restarts repaired.

import (
	"regexp"
	"testing"
	"time"

	"source.plinth.dev/test/controllertest"
)

// startTimeout bounds how long a crash test waits for a start.
const startTimeout = 2 * time.Minute

// provisionerStarted is the line a start's provisioner logs once its
// informers are synced and its workers begin (run.go).
var provisionerStarted = regexp.MustCompile(`\] provisioner for driver \S+ on node \S+ \(hostname [^)]*\) started`)

// recoveryLog is what plinth-node's log says its restarts repaired, and
// where its kills cut it short.
type recoveryLog struct {
	orphans   map[string]bool   // volumes removed as orphans
	recovered map[string]string // interrupted volume operations settled by volume.Recover: ID -> what was done
	failed    []string          // recoveries that failed
	// cutDeletions are volumes whose data a process deleted that was
	// killed before it saw their PV deleted.
	cutDeletions map[string]bool
}

// The log lines of the repairs and of deletions (node/kubernetes:
// kubernetes.go logs volume.Recover's results; provisioner: orphans.go the
// orphans removed, sync.go each step of a deletion). Each is matched after
// the "] " that ends a log line's header, and by a whole volume ID, so that
// a line cut short by SIGKILL neither counts nor confuses the next.
var (
	volumeIDPattern   = `pvc-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`
	orphanLine        = regexp.MustCompile(`\] audit: deleted (?:orphaned|quarantined) volume (` + volumeIDPattern + `) and its data`)
	recoveredLine     = regexp.MustCompile(`\] recovered volume (` + volumeIDPattern + `): ([^\n]+)`)
	failedLine        = regexp.MustCompile(`\] recovering volume (` + volumeIDPattern + `): [^\n]* failed: [^\n]*`)
	deletedVolumeLine = regexp.MustCompile(`\] audit: deleted volume (` + volumeIDPattern + `) and its data: PV released`)
	deletedPVLine     = regexp.MustCompile(`\] audit: deleted PV (` + volumeIDPattern + `)\n`)
)

// readRecoveryLog reads what the restarts repaired from plinth-node's
// log, start by start. Distinct volumes are counted: a repair logged
// again (the same orphan seen by two starts) is one repair.
func readRecoveryLog(t *testing.T, p *controllertest.NodeProcess) recoveryLog {
	t.Helper()
	starts, err := p.Incarnations()
	if err != nil {
		t.Fatal(err)
	}
	rec := recoveryLog{orphans: map[string]bool{}, recovered: map[string]string{}, cutDeletions: map[string]bool{}}
	for i, log := range starts {
		for _, m := range orphanLine.FindAllStringSubmatch(log, -1) {
			rec.orphans[m[1]] = true
		}
		for _, m := range recoveredLine.FindAllStringSubmatch(log, -1) {
			rec.recovered[m[1]] = m[2]
		}
		rec.failed = append(rec.failed, failedLine.FindAllString(log, -1)...)
		if i == len(starts)-1 {
			break // the last start was stopped, not killed
		}
		pvDeleted := map[string]bool{}
		for _, m := range deletedPVLine.FindAllStringSubmatch(log, -1) {
			pvDeleted[m[1]] = true
		}
		for _, m := range deletedVolumeLine.FindAllStringSubmatch(log, -1) {
			if !pvDeleted[m[1]] {
				rec.cutDeletions[m[1]] = true
			}
		}
	}
	return rec
}
