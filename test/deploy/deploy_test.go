// Package deploy tests deploy/ for real: a cluster of test/launch without
// its built-in plinth-node, plinth-node's image (`make image`) imported
// into the node's containerd, `kubectl apply -k` of an overlay of deploy/
// that only moves the host paths to the launched node's, and the e2e
// workload (test/e2e/persistentvolume) against it. Then `kubectl delete
// -k` uninstalls it, and the data of a volume stays on the node.
//
// Run by `make test-e2e` (as root, PLINTH_E2E=1, PLINTH_IMAGE set).
package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"source.plinth.dev/node/kubernetes/admission"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/e2e/workload"
	"source.plinth.dev/test/launch"
)

const (
	// imageEnv names the OCI archive of plinth-node's image (build/scripts/image.sh).
	imageEnv = "PLINTH_IMAGE"
	// kubeletEnv names an unpatched kubelet
	// (third_party/kubernetes/upstream-kubelet.sh): deploy/ is for the
	// clusters people run, and their kubelets take losetup pseudo-locks
	// on block volumes.
	kubeletEnv = "PLINTH_UPSTREAM_KUBELET"
)

// The cluster has no admission webhook of its own: deploy/ installs it.
var cluster = launch.NewShared(launch.Config{Images: images(), UpstreamKubelet: os.Getenv(kubeletEnv), NoAdmissionWebhook: true})

func images() []string {
	if p := os.Getenv(imageEnv); p != "" {
		return []string{p}
	}
	return nil
}

func TestMain(m *testing.M) { os.Exit(cluster.Run(m)) }

// clusterFor returns the shared cluster, or skips outside `make test-e2e`.
func clusterFor(t *testing.T) *launch.Cluster {
	t.Helper()
	if os.Getenv("PLINTH_E2E") != "1" {
		t.Skip("cluster test: run with make test-e2e (PLINTH_E2E=1)")
	}
	if os.Getenv(imageEnv) == "" {
		t.Fatalf("%s is not set: build the image with make image", imageEnv)
	}
	if os.Getenv(kubeletEnv) == "" {
		t.Fatalf("%s is not set: build the kubelet with third_party/kubernetes/upstream-kubelet.sh", kubeletEnv)
	}
	return cluster.Cluster(t)
}

// trustedNodeLabel marks the nodes an administrator lets run the
// admission webhook where no control-plane node can (docs/operating.md):
// a kubelet may not set a label of node-restriction.kubernetes.io/ on its
// own Node (the NodeRestriction admission plugin).
const trustedNodeLabel = "node-restriction.kubernetes.io/plinth-admission"

// overlay writes a kustomization over deploy/ that points the DaemonSet's
// host paths at the launched node's (its data filesystem, its kubelet's
// root directory) and its API client at the API server, which listens on
// loopback only and has no kube-proxy in front of its Service. The
// webhook's Deployment gets the host network for the same reason, and so
// one replica (one port 9443 on the one node), and runs on nodes labelled
// trustedNodeLabel instead of control-plane nodes (docs/operating.md's
// override). Nothing else of deploy/ changes.
func overlay(t *testing.T, c *launch.Cluster) string {
	t.Helper()
	root, err := launch.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(c.Dir, "deploy-overlay")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(dir, filepath.Join(root, "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	nodeRoot, ephemeral := filepath.Join(c.Dir, "deploy-node"), filepath.Join(c.Dir, "deploy-ephemeral")
	// The metrics address of deploy/'s DaemonSet, where its probes look.
	args := []string{"--in-cluster", "--root=" + nodeRoot, "--data-dir=" + c.DataDir, "--ephemeral-dir=" + ephemeral,
		"--kubelet-dir=" + c.KubeletRootDir, "--node-name=$(NODE_NAME)", "--metrics-address=:9809"}
	// A host without quotas gets filesystem claims through the optional
	// ConfigMap, the way an operator would allow them.
	config := ""
	if !c.QuotaEnforced {
		config = "configMapGenerator:\n- name: plinth-node-config\n  namespace: plinth-system\n  options: {disableNameSuffixHash: true}\n  literals: [PLINTH_ALLOW_UNENFORCED_CAPACITY=true]\n"
	}
	u := strings.TrimPrefix(c.APIServerURL, "https://")
	host, port, _ := strings.Cut(u, ":")
	apiServer := []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: host}, {Name: "KUBERNETES_SERVICE_PORT", Value: port}}
	env := append([]corev1.EnvVar{
		{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
	}, apiServer...)
	hostToContainer, bidirectional := corev1.MountPropagationHostToContainer, corev1.MountPropagationBidirectional
	orCreate, directory := corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory
	type vol struct {
		name, path  string
		typ         *corev1.HostPathType
		propagation *corev1.MountPropagationMode
	}
	var mounts []corev1.VolumeMount
	var volumes []corev1.Volume
	for _, v := range []vol{
		{"plinth", nodeRoot, &orCreate, nil},
		{"data", c.DataDir, &directory, &hostToContainer},
		{"ephemeral", ephemeral, &orCreate, nil},
		{"kubelet", c.KubeletRootDir, &directory, &bidirectional},
		{"dev", "/dev", &directory, nil},
	} {
		mounts = append(mounts, corev1.VolumeMount{Name: v.name, MountPath: v.path, MountPropagation: v.propagation})
		volumes = append(volumes, corev1.Volume{Name: v.name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: v.path, Type: v.typ}}})
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args},
		{"op": "replace", "path": "/spec/template/spec/containers/0/env", "value": env},
		{"op": "replace", "path": "/spec/template/spec/containers/0/volumeMounts", "value": mounts},
		{"op": "replace", "path": "/spec/template/spec/volumes", "value": volumes},
	})
	if err != nil {
		t.Fatal(err)
	}
	webhookPatch, err := json.Marshal([]map[string]any{
		{"op": "replace", "path": "/spec/replicas", "value": 1},
		// The launched node is no control-plane node: the override
		// docs/operating.md gives clusters without one (and the node gets
		// its label, in TestDeployWorkload).
		{"op": "replace", "path": "/spec/template/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/0/key",
			"value": trustedNodeLabel},
		{"op": "add", "path": "/spec/template/spec/hostNetwork", "value": true},
		{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": apiServer},
	})
	if err != nil {
		t.Fatal(err)
	}
	kust := fmt.Sprintf("resources:\n- %s\npatches:\n- target: {kind: DaemonSet, name: plinth-node}\n  patch: %q\n- target: {kind: Deployment, name: plinth-admission}\n  patch: %q\n%s",
		base, patch, webhookPatch, config)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func kubectl(t *testing.T, c *launch.Cluster, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func poll(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting %v for %s: %v (last: %v)", timeout, what, err, last)
	}
}

// TestDeployWorkload installs Plinth through deploy/ and runs the e2e
// workload's four claims (filesystem and block, each also read-only)
// through a resize, then uninstalls and checks that a volume's data stays.
func TestDeployWorkload(t *testing.T) {
	c := clusterFor(t)
	ctx := context.Background()
	dir := overlay(t, c)
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := node.Status.NodeInfo.KubeletVersion; strings.Contains(v, "plinth") {
		t.Fatalf("the node runs kubelet %s, the patched one; want upstream's", v)
	} else {
		t.Logf("kubelet %s (upstream, unpatched)", v)
	}

	// The workload is created together with the installation, as a user
	// would: the time to its first Bound claim is what installing costs.
	kubectl(t, c, "label", "node", c.NodeName, trustedNodeLabel+"=")
	applied := time.Now()
	kubectl(t, c, "apply", "-k", dir)
	// Whatever fails below, the DaemonSet goes before the cluster stops
	// (which deletes every pod and waits: a DaemonSet would recreate its).
	t.Cleanup(func() { kubectl(t, c, "delete", "-k", dir, "--ignore-not-found", "--wait=true", "--timeout=2m") })
	spec := workload.NewSpec("deploy-workload", workload.Runtime{Name: "runc"}, c.QuotaEnforced)
	for _, pvc := range spec.PVCs {
		if _, err := c.Client.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, spec.Pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 3*time.Minute, "the first Bound claim", func(ctx context.Context) (bool, error) {
		for _, pvc := range spec.PVCs {
			live, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, pvc.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if live.Status.Phase == corev1.ClaimBound {
				return true, nil
			}
		}
		return false, fmt.Errorf("no claim bound yet")
	})
	t.Logf("kubectl apply -k to the first Bound claim: %.1fs", time.Since(applied).Seconds())
	testWebhookInForce(t, c)
	testWebhookAccountHeld(t, c)
	testPlacerInForce(t, c)

	if _, err := workload.WaitMarker(ctx, c.Client, "default", spec.Pod.Name, "[INIT-PASSED]", "[INIT-FAILED]", 3*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, kubectl(t, c, "-n", "plinth-system", "logs", "daemonset/plinth-node", "--tail=50"))
	}
	t.Logf("workload initialised %.1fs after kubectl apply", time.Since(applied).Seconds())
	waitNodeReady(t, c)
	// The unpatched kubelet "locks" each block volume it maps with a loop
	// device over the device node Plinth published (losetup): the CSI
	// plugin must live with that second loop device on top of its own.
	locks := pseudoLocks(t, c)
	if len(locks) == 0 {
		t.Errorf("no loop device over a published block volume: the upstream kubelet's pseudo-locks are not exercised")
	}
	t.Logf("the kubelet's block pseudo-locks: %v", locks)
	for _, pvc := range spec.PVCs {
		patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, workload.ResizeTo)
		if _, err := c.Client.CoreV1().PersistentVolumeClaims("default").Patch(ctx, pvc.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	logs, err := workload.WaitMarker(ctx, c.Client, "default", spec.Pod.Name, "[RESIZE-PASSED]", "[RESIZE-FAILED]", 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	passed, skipped, failed := workload.Checks(logs)
	if len(failed) > 0 || passed == 0 {
		t.Fatalf("workload: %d passed, failed: %v", passed, failed)
	}
	t.Logf("workload: %d checks passed in the pod, %d skipped %v", passed, len(skipped), skipped)
	want := resource.MustParse(workload.ResizeTo)
	for _, pvc := range spec.PVCs {
		live, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := live.Status.Capacity[corev1.ResourceStorage]; got.Cmp(want) != 0 {
			t.Errorf("claim %s has capacity %s after the resize, want %s", pvc.Name, got.String(), want.String())
		}
	}
	if !c.QuotaEnforced {
		// This host's data filesystem cannot enforce sizes: the node says
		// so where kubectl describe node shows it.
		poll(t, 30*time.Second, "the node's CapacityNotEnforced Event", func(ctx context.Context) (bool, error) {
			evs, err := c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,reason=CapacityNotEnforced"})
			if err != nil {
				return false, err
			}
			return len(evs.Items) > 0, fmt.Errorf("%d events", len(evs.Items))
		})
	}
	testUninstallKeepsData(t, c, dir, spec)
}

// waitNodeReady waits until the DaemonSet's pod is Ready, never
// restarted: its readiness probe (/readyz on the metrics address) says
// every part of plinth-node is healthy.
func waitNodeReady(t *testing.T, c *launch.Cluster) {
	t.Helper()
	poll(t, 2*time.Minute, "the plinth-node pod Ready", func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods("plinth-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=plinth-node"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Errorf("pods: %v, %d", err, len(pods.Items))
		}
		for _, cond := range pods.Items[0].Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				if n := pods.Items[0].Status.ContainerStatuses[0].RestartCount; n != 0 {
					return false, fmt.Errorf("Ready, but restarted %d times (liveness probe?)", n)
				}
				return true, nil
			}
		}
		return false, fmt.Errorf("not Ready: %v", pods.Items[0].Status.Conditions)
	})
}

// testWebhookInForce: deploy/'s admission webhook refuses the DaemonSet's
// node agent a PV for a claim placed on another node (the admin asks as
// that agent, impersonating its user and its token's node, as a dry run).
func testWebhookInForce(t *testing.T, c *launch.Cluster) {
	ctx := context.Background()
	elsewhere, err := c.Client.CoreV1().PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "placed-elsewhere", Annotations: map[string]string{
			"volume.kubernetes.io/storage-provisioner": names.DriverName,
			"volume.kubernetes.io/selected-node":       "elsewhere",
		}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
			StorageClassName: new(names.StorageClassName),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().PersistentVolumeClaims("default").Delete(ctx, elsewhere.Name, metav1.DeleteOptions{})
	})
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: clusterobjects.DaemonSetUser(),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + clusterobjects.DaemonSetNamespace, "system:authenticated"},
		// What the API server adds to a token bound to a pod on the node.
		Extra: map[string][]string{"authentication.kubernetes.io/node-name": {c.NodeName}},
	}
	agent, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	refusal := `admission webhook "` + clusterobjects.WebhookCheckName + `" denied the request`
	poll(t, time.Minute, "the webhook's refusal of a PV for a claim placed elsewhere", func(ctx context.Context) (bool, error) {
		_, err := agent.CoreV1().PersistentVolumes().Create(ctx, admission.Probe(c.NodeName, elsewhere), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil:
			t.Fatalf("the node agent's PV for claim %s, placed on node elsewhere, was admitted", elsewhere.Name)
		case !strings.Contains(err.Error(), refusal) || !strings.Contains(err.Error(), "is placed on node elsewhere"):
			return false, err
		}
		t.Logf("deploy/'s webhook in force: %v", err)
		return true, nil
	})
}

// testWebhookAccountHeld: deploy/'s webhook has put its CA into the
// caBundle with its own account, which deploy/'s policies refuse any other
// change of the configuration (the admin asks as that account, as a dry
// run): here, making the webhook fail open.
func testWebhookAccountHeld(t *testing.T, c *launch.Cluster) {
	ctx := context.Background()
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: clusterobjects.AdmissionServiceAccountUser(),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + clusterobjects.AdmissionNamespace, "system:authenticated"},
	}
	server, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	webhooks := server.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	live, err := webhooks.Get(ctx, clusterobjects.WebhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(live.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Fatalf("the webhook admitted writes, but its configuration has no caBundle")
	}
	ignore := admissionregistrationv1.Ignore
	live.Webhooks[0].FailurePolicy = &ignore
	_, err = webhooks.Update(ctx, live, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may change only the caBundle") {
		t.Fatalf("the webhook's account making it fail open: %v, want refused by its policy", err)
	}
	t.Logf("deploy/'s policy holds the webhook's account to its caBundle: %v", err)
}

// testUninstallKeepsData deletes the workload's pod (not its claims) and
// uninstalls Plinth: the PVs and claims stay in the API (deploy/ does not
// own them) and each volume's data on the node.
func testUninstallKeepsData(t *testing.T, c *launch.Cluster, dir string, spec workload.Spec) {
	ctx := context.Background()
	live, err := c.Client.CoreV1().Pods("default").Get(ctx, spec.Pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Not a forced deletion (grace 0), which removes the object at once:
	// the kubelet must unpublish the volumes while the plugin still runs.
	grace := int64(1)
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, spec.Pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	podDir := filepath.Join(c.KubeletRootDir, "pods", string(live.UID))
	poll(t, 2*time.Minute, "the kubelet to tear down the workload pod's volumes", func(ctx context.Context) (bool, error) {
		_, err := os.Stat(podDir)
		return os.IsNotExist(err), fmt.Errorf("%s: %v", podDir, err)
	})
	if locks := pseudoLocks(t, c); len(locks) > 0 {
		t.Errorf("pseudo-locks left after the pod is gone: %v", locks)
	}
	var pvs []string
	for _, pvc := range spec.PVCs {
		live, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pvs = append(pvs, live.Spec.VolumeName)
	}
	kubectl(t, c, "delete", "-k", dir, "--wait=true", "--timeout=2m")
	poll(t, 2*time.Minute, "plinth-node's pod to be gone", func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods("plinth-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0, fmt.Errorf("%d pods left", len(pods.Items))
	})
	for _, pv := range pvs {
		if _, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{}); err != nil {
			t.Errorf("PV %s after uninstalling: %v", pv, err)
		}
		fsDir := filepath.Join(c.DataDir, "volumes", pv)
		_, errDir := os.Stat(fsDir)
		_, errImg := os.Stat(fsDir + ".img")
		if errDir != nil && errImg != nil {
			t.Errorf("volume %s is gone from the node after uninstalling (%v; %v)", pv, errDir, errImg)
		}
	}
	t.Logf("uninstalled: %d volumes stay on the node in %s, their PVs and claims in the API", len(pvs), filepath.Join(c.DataDir, "volumes"))
}

// pseudoLocks lists the loop devices whose backing file is a device node
// the kubelet maps (below its root directory) or a loop device itself.
func pseudoLocks(t *testing.T, c *launch.Cluster) []string {
	t.Helper()
	all, err := loop.Bindings()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range all {
		if strings.HasPrefix(b.Backing, c.KubeletRootDir+"/") || strings.HasPrefix(b.Backing, "/dev/loop") {
			out = append(out, b.Path()+" over "+b.Backing)
		}
	}
	return out
}
