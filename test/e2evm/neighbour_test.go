package e2evm

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
	"source.plinth.dev/test/nodevm"
)

// neighbourRounds is how many of the neighbour's writes (one a second)
// must succeed after an attack: the attacker has filled the project it
// moved into by then, so the first of them would fail.
const neighbourRounds = 3

// TestPodCannotMoveFilesIntoNeighbourProject is issue 37's quota attack
// on the VM node, where quotas are enforced: a pod with a filesystem
// claim gives a directory of its volume the project ID of a neighbour's
// volume (FS_IOC_FSSETXATTR, as `chattr -p` does; any file's owner may,
// from the host's user namespace) and fills it, which, where the change
// goes through, fills the neighbour's quota and makes the neighbour's
// writes within its size fail. On a Plinth node runc runs through
// plinth-node's wrapper (package runcguard), so the change fails with
// EPERM, whatever seccomp profile the pod asks for (none, which is
// Unconfined, or RuntimeDefault); under gVisor the sandbox refuses it on
// its own. The neighbour writes half its size every second throughout,
// and every write must succeed.
func TestPodCannotMoveFilesIntoNeighbourProject(t *testing.T) {
	w := vmWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := launch.CreateGVisorRuntimeClass(ctx, w.cp.Client); err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t, w, "neighbour")
	cs := w.cp.Client
	start := func(name, size string, args []string, mutate func(*corev1.PodSpec)) {
		t.Helper()
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, nodevm.Claim(name, corev1.PersistentVolumeFilesystem, size), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		spec := corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "main", Image: images.PersistentVolumeRef, ImagePullPolicy: corev1.PullNever,
				Args:         args,
				VolumeMounts: []corev1.VolumeMount{{Name: name, MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{nodevm.ClaimVolume(name)},
		}
		if mutate != nil {
			mutate(&spec)
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start("neighbour", "16Mi", []string{"-project-writes", "/data"}, nil)
	line, err := waitLog(ctx, w, ns, "neighbour", "[PROJECT]", 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	project := strings.TrimPrefix(line, "[PROJECT] ")
	if _, err := strconv.ParseUint(project, 10, 32); err != nil {
		t.Fatalf("the neighbour's project: %q", line)
	}
	t.Logf("the neighbour's volume is project %s", project)

	for _, a := range []struct {
		name   string
		mutate func(*corev1.PodSpec)
	}{
		{"unconfined", nil},
		{"runtimedefault", func(s *corev1.PodSpec) {
			s.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
		}},
		{"gvisor", func(s *corev1.PodSpec) { s.RuntimeClassName = ptr(launch.GVisorRuntimeClass) }},
	} {
		name := "attacker-" + a.name
		start(name, "16Mi", []string{"-move-into", project + ":/data"}, a.mutate)
		line, err := waitLog(ctx, w, ns, name, "[MOVE", 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s", name, line)
		after := neighbourRound(t, ctx, w, ns)
		logs := waitNeighbourRound(t, ctx, w, ns, after+neighbourRounds)
		if failed := linesWith(logs, "[WRITE-FAILED]"); len(failed) > 0 {
			t.Errorf("after %s's attack (%s), the neighbour's writes within its size failed:\n%s", name, line, strings.Join(failed, "\n"))
		} else {
			t.Logf("the neighbour's writes all succeeded, %d rounds after %s's attack", neighbourRounds, name)
		}
		if !strings.HasPrefix(line, "[MOVE-REFUSED]") {
			t.Errorf("%s moved its files into the neighbour's project: %s", name, line)
		} else if a.name != "gvisor" && !strings.Contains(line, "operation not permitted") {
			t.Errorf("%s's move was refused, but not with EPERM: %s", name, line)
		}
		if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

var roundRE = regexp.MustCompile(`^\[WRITE-(?:OK|FAILED)\] round (\d+)`)

// neighbourRound returns the number of the neighbour's last write.
func neighbourRound(t *testing.T, ctx context.Context, w *world, ns string) int {
	t.Helper()
	b, err := w.cp.Client.CoreV1().Pods(ns).GetLogs("neighbour", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return lastRound(string(b))
}

func lastRound(logs string) int {
	last := 0
	for _, l := range strings.Split(logs, "\n") {
		if m := roundRE.FindStringSubmatch(l); m != nil {
			last, _ = strconv.Atoi(m[1])
		}
	}
	return last
}

// waitNeighbourRound waits until the neighbour has written round n, and
// returns its log.
func waitNeighbourRound(t *testing.T, ctx context.Context, w *world, ns string, n int) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := w.cp.Client.CoreV1().Pods(ns).GetLogs("neighbour", &corev1.PodLogOptions{}).DoRaw(ctx)
		if err == nil && lastRound(string(b)) >= n {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the neighbour did not write round %d within 2 minutes (%v):\n%s", n, err, b)
		}
		time.Sleep(time.Second)
	}
}

func linesWith(logs, prefix string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}
