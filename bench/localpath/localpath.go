// Package localpath sets up the peer the benchmarks compare Plinth with:
// rancher's local-path-provisioner v0.0.30, configured as its own
// deploy/local-path-storage.yaml configures it (namespace, service account,
// ConfigMap with config.json, setup and teardown scripts and the helper
// pod's template, StorageClass local-path binding on first consumer) but
// run as a process on the host with the admin kubeconfig instead of as a
// Deployment: the clusters here pull no images, and a process is what a
// benchmark can start, measure and stop. Its client is what a Deployment's
// would be (client-go's default rate limit: nothing sets one).
package localpath

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The names local-path's own manifest gives its objects.
const (
	Namespace      = "local-path-storage"
	Class          = "local-path"
	Provisioner    = "rancher.io/local-path"
	ServiceAccount = "local-path-provisioner-service-account"
	ConfigMap      = "local-path-config"
	// HelperImage is the image its helper pods run: v0.0.30 takes it from
	// helperPod.yaml ("busybox", which containerd resolves to this) and
	// ignores --helper-image.
	HelperImage = "docker.io/library/busybox:latest"
)

// helperPod is the helper pod template of deploy/local-path-storage.yaml.
const helperPod = `apiVersion: v1
kind: Pod
metadata:
  name: helper-pod
spec:
  priorityClassName: system-node-critical
  tolerations:
    - key: node.kubernetes.io/disk-pressure
      operator: Exists
      effect: NoSchedule
  containers:
  - name: helper-pod
    image: busybox
    imagePullPolicy: IfNotPresent
`

// Binary returns bin, or when it is empty the binary that
// third_party/localpath/build.sh (under repo) builds, cached by version.
func Binary(ctx context.Context, repo, bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	script := filepath.Join(repo, "third_party", "localpath", "build.sh")
	cmd := exec.CommandContext(ctx, script)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building local-path-provisioner with %s: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// Install creates the objects local-path-provisioner reads, its volumes
// going below dir on every node; objects that exist are kept.
func Install(ctx context.Context, c kubernetes.Interface, dir string) error {
	create := func(what string, err error) error {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("local-path: creating %s: %w", what, err)
		}
		return nil
	}
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
	if err := create("namespace", err); err != nil {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ServiceAccount, Namespace: Namespace}}
	_, err = c.CoreV1().ServiceAccounts(Namespace).Create(ctx, sa, metav1.CreateOptions{})
	if err := create("service account", err); err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigMap, Namespace: Namespace},
		Data: map[string]string{
			"config.json":    fmt.Sprintf(`{"nodePathMap":[{"node":"DEFAULT_PATH_FOR_NON_LISTED_NODES","paths":[%q]}]}`, dir),
			"setup":          "#!/bin/sh\nset -eu\nmkdir -m 0777 -p \"$VOL_DIR\"\n",
			"teardown":       "#!/bin/sh\nset -eu\nrm -rf \"$VOL_DIR\"\n",
			"helperPod.yaml": helperPod,
		},
	}
	_, err = c.CoreV1().ConfigMaps(Namespace).Create(ctx, cm, metav1.CreateOptions{})
	if err := create("ConfigMap", err); err != nil {
		return err
	}
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	del := corev1.PersistentVolumeReclaimDelete
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: Class},
		Provisioner:       Provisioner,
		VolumeBindingMode: &wffc,
		ReclaimPolicy:     &del,
	}
	_, err = c.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
	return create("StorageClass", err)
}

// Args are the provisioner's arguments against the cluster of kubeconfig.
func Args(kubeconfig string) []string {
	return []string{"start",
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + Namespace,
		"--configmap-name=" + ConfigMap,
		"--service-account-name=" + ServiceAccount,
		"--provisioner-name=" + Provisioner,
	}
}
