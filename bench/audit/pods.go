package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/bench/cluster"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/nodevm"
)

const (
	namespace = metav1.NamespaceDefault
	// bigClaim holds the files the audit walks; fioClaim the file fio
	// reads and writes.
	bigClaim = "big"
	fioClaim = "fio"
	// perDir is how many files the fill makes in each directory.
	perDir    = 1000
	mountPath = "/data"
	// podTimeout bounds one pod's run, the fill's included.
	podTimeout = 30 * time.Minute
)

// createClaims creates the two filesystem claims of Plinth's class, the
// big one large enough for files (bigClaimGiB).
func createClaims(ctx context.Context, c kubernetes.Interface, files int) error {
	for _, cl := range []*corev1.PersistentVolumeClaim{
		nodevm.Claim(bigClaim, corev1.PersistentVolumeFilesystem, fmt.Sprintf("%dGi", bigClaimGiB(files))),
		nodevm.Claim(fioClaim, corev1.PersistentVolumeFilesystem, "512Mi"),
	} {
		if _, err := c.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, cl, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating claim %s: %w", cl.Name, err)
		}
	}
	return nil
}

// fillScript makes files empty files in directories of perDir under
// dir, each directory's files by one touch (xargs), in two shells at
// once (the VM has two CPUs, and under TCG creating files is CPU work),
// then counts the files it finds and prints "FILES <count>".
func fillScript(dir string, files int) string {
	dirs := files / perDir
	return fmt.Sprintf(`set -e
cd %s
part() {
	i=$1
	while [ $i -lt $2 ]; do
		mkdir d$i
		(cd d$i && seq 1 %d | xargs touch)
		i=$((i+1))
	done
}
part 0 %d &
a=$!
part %d %d &
b=$!
wait $a
wait $b
echo FILES $(find . -type f | wc -l)
`, dir, perDir, dirs/2, dirs/2, dirs)
}

// fill runs the fill on the big claim and checks the count it printed.
func fill(ctx context.Context, c kubernetes.Interface, files int) error {
	out, _, err := runPod(ctx, c, pod{name: "fill", claim: bigClaim, image: images.BusyboxRef,
		command: []string{"sh", "-c", fillScript(mountPath, files)}})
	if err != nil {
		return err
	}
	got := strings.TrimSpace(string(out))
	if want := "FILES " + strconv.Itoa(files); !strings.HasSuffix(got, want) {
		return fmt.Errorf("the fill printed %q, want %q", got, want)
	}
	return nil
}

// pod is one run-to-completion pod on a claim.
type pod struct {
	name, claim, image string
	command, args      []string
}

// runPod runs p to its end and returns its log and the span from its
// creation to its end as this host saw it (the container ran inside it);
// it deletes the pod, and waits until it is gone, after the span.
func runPod(ctx context.Context, c kubernetes.Interface, p pod) ([]byte, span, error) {
	grace := int64(1)
	// A CPU's request: fio's latency should be the volume's, not a
	// BestEffort pod's wait for the CPU (as bench/datapath's pods).
	ctr := corev1.Container{Name: "main", Image: p.image, ImagePullPolicy: corev1.PullNever,
		Command: p.command, Args: p.args,
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: mountPath}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("500m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		}}}
	spec := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{ctr},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: p.claim},
			}}},
		},
	}
	var s span
	s.start = time.Now()
	out, ended, err := cluster.RunPod(ctx, c, spec, podTimeout)
	s.end = ended
	return out, s, err
}
