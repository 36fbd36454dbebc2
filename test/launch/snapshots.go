package launch

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/snapshotapi"
)

// The snapshot API: the snapshot.storage.k8s.io CRDs and the
// snapshot-controller of kubernetes-csi/external-snapshotter, which every
// cluster that offers CSI snapshots runs beside kube-controller-manager
// (Kubernetes itself ships neither). third_party/snapshotter/build.sh
// builds the controller and copies the CRDs out of the upstream module at
// the same version; a cluster applies them as they are, so it serves what
// any cluster with that release serves.

// SnapshotBinEnv names the environment variable that points at the
// output of third_party/snapshotter/build.sh. The make targets set it;
// without it, SnapshotControllerBinaries runs the build script itself.
const SnapshotBinEnv = "PLINTH_SNAPSHOT_BIN"

// SnapshotControllerBinaries returns the directory with the
// snapshot-controller and its crd/ directory: $PLINTH_SNAPSHOT_BIN, or else
// the output of third_party/snapshotter/build.sh (cached; about three
// minutes cold, its progress going to log).
func SnapshotControllerBinaries(ctx context.Context, log io.Writer) (string, error) {
	return prebuiltOrBuild(ctx, log, SnapshotBinEnv, "snapshotter")
}

// snapshotBinaries finds the snapshot API's directory (Config.SnapshotBin,
// else SnapshotControllerBinaries) and checks that it holds what
// startSnapshotAPI needs.
func (c *Cluster) snapshotBinaries(ctx context.Context) (string, error) {
	dir := c.cfg.SnapshotBin
	if dir == "" {
		var err error
		if dir, err = SnapshotControllerBinaries(ctx, c.logw); err != nil {
			return "", err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshot-controller")); err != nil {
		return "", fmt.Errorf("snapshot API in %s: %w", dir, err)
	}
	if crds, _ := filepath.Glob(filepath.Join(dir, "crd", "*.yaml")); len(crds) == 0 {
		return "", fmt.Errorf("snapshot API in %s: no crd/*.yaml", dir)
	}
	return dir, nil
}

// crdGVR is the resource of CustomResourceDefinitions, served by every API
// server: the dynamic client applies the upstream YAML as it is, without
// the apiextensions types (and their module) in this one.
var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// snapshotFieldManager owns the CRDs' fields in server-side apply.
const snapshotFieldManager = "plinth-launch"

// startSnapshotAPI applies the CRDs in dir/crd, waits until the API server
// serves them (Established), and then starts the snapshot-controller, so
// that a cluster reported ready accepts VolumeSnapshots at once and acts on
// them. The controller runs alone (no leader election) as an identity of
// its own in system:masters, what upstream's RBAC would grant and more,
// and with distributed snapshotting: it labels each VolumeSnapshotContent
// with the node of its source volume, the node that must make the snapshot.
func (c *Cluster) startSnapshotAPI(ctx context.Context) error {
	dir := c.SnapshotBin
	names, err := c.applyCRDs(ctx, filepath.Join(dir, "crd"))
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating dynamic client: %w", err)
	}
	for _, name := range names {
		if err := c.waitFor(ctx, "CRD "+name+" Established", 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return crdEstablished(crd), nil
		}); err != nil {
			return err
		}
	}
	c.mark("snapshot CRDs established")
	if err := c.applySnapshotClass(ctx); err != nil {
		return err
	}
	return c.run("snapshot-controller", filepath.Join(dir, "snapshot-controller"), []string{
		"--kubeconfig=" + c.kubeconfigPath("snapshot-controller"),
		"--leader-election=false",
		"--enable-distributed-snapshotting=true",
		"--v=2",
	}, []string{hostPATH})
}

// applyCRDs applies every *.yaml in dir, each one CustomResourceDefinition,
// and returns their names.
func (c *Cluster) applyCRDs(ctx context.Context, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("listing CRDs in %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in %s", dir)
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	var names []string
	for _, f := range files {
		crd, err := readCRD(f)
		if err != nil {
			return nil, err
		}
		if _, err := dyn.Resource(crdGVR).Apply(ctx, crd.GetName(), crd, metav1.ApplyOptions{FieldManager: snapshotFieldManager, Force: true}); err != nil {
			return nil, fmt.Errorf("applying CRD %s: %w", crd.GetName(), err)
		}
		names = append(names, crd.GetName())
	}
	return names, nil
}

// readCRD reads one CustomResourceDefinition from a YAML file.
func readCRD(file string) (*unstructured.Unstructured, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading CRD: %w", err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("reading CRD %s: %w", file, err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(js); err != nil {
		return nil, fmt.Errorf("reading CRD %s: %w", file, err)
	}
	if obj.GroupVersionKind() != crdGVR.GroupVersion().WithKind("CustomResourceDefinition") || obj.GetName() == "" {
		return nil, fmt.Errorf("reading CRD %s: it holds a %s named %q, not a CustomResourceDefinition", file, obj.GroupVersionKind(), obj.GetName())
	}
	return obj, nil
}

// crdEstablished reports whether a CRD's Established condition is True:
// the API server serves its resource from then on.
func crdEstablished(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	return slices.ContainsFunc(conds, func(c any) bool {
		m, ok := c.(map[string]any)
		return ok && m["type"] == "Established" && m["status"] == "True"
	})
}

// applySnapshotClass creates the driver's default VolumeSnapshotClass
// (clusterobjects.SnapshotClass), as an installer does once the snapshot
// CRDs are served, so that a user of the cluster snapshots a claim
// without making a class first.
func (c *Cluster) applySnapshotClass(ctx context.Context) error {
	client, err := snapshotapi.NewClient(c.RESTConfig)
	if err != nil {
		return err
	}
	class := clusterobjects.SnapshotClass()
	if _, err := client.SnapshotV1().VolumeSnapshotClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating VolumeSnapshotClass %s: %w", class.Name, err)
	}
	return nil
}
