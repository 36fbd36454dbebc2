package csi

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/mountinfo/mounttest"
	"source.plinth.dev/test/ktest"
)

// TestMain lets `make test-kernel` run these tests on the host and in the
// kernel VM, where filesystem volumes have real project quotas.
func TestMain(m *testing.M) { ktest.Main(m) }

const MiB = 1 << 20

// env is a plugin over real directories: a data tree, a kubelet tree and
// an ephemeral tree, all below one temporary directory.
type env struct {
	t       testing.TB
	dir     string
	root    localstorage.Root
	volumes *volume.Manager
	srv     *Server
	boot    string
}

// newEnv builds an env on dataDir (a fresh temporary directory when "") and
// starts a server on it. Needs root: the plugin mounts and attaches loop
// devices.
func newEnv(t testing.TB, dataDir string) *env {
	t.Helper()
	ktest.RequireRoot(t)
	e := &env{t: t, dir: t.TempDir(), boot: "boot-1"}
	if dataDir == "" {
		dataDir = filepath.Join(e.dir, "data")
	}
	if err := e.root.Place(e.dir); err != nil {
		t.Fatal(err)
	}
	if err := e.root.Data.Place(dataDir); err != nil {
		t.Fatal(err)
	}
	if err := e.root.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	qerr := fsquota.Probe(e.root.Data.Volumes.FullPath())
	v, err := volume.New(volume.Config{Data: &e.root.Data, QuotaError: qerr, AllowUnenforced: qerr != nil})
	if err != nil {
		t.Fatal(err)
	}
	e.volumes = v
	e.restart()
	t.Cleanup(e.cleanup)
	return e
}

// die ends what the node agent's process holds (its loop devices), as its
// death would; the records stay.
func (e *env) die() {
	e.srv.holds.releaseUnless(func(string) bool { return false })
}

// restart replaces the server by a new one over the same directories, as
// a restarted node agent would start: nothing carried over in memory.
func (e *env) restart() {
	e.t.Helper()
	if e.srv != nil {
		e.die()
	}
	srv, err := NewServer(Config{
		Volumes:    e.volumes,
		Kubelet:    &e.root.Kubelet,
		State:      &e.root.Ephemeral.CSI,
		NodeName:   "node-a",
		Controller: true,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	srv.readBootID = func() (string, error) { return e.boot, nil }
	e.srv = srv
	if err := e.srv.Start(context.Background(), logtree.New().LeveledFor("csi")); err != nil {
		e.t.Fatal(err)
	}
}

// cleanup unpublishes whatever a test left published, so no mount or loop
// device outlives it, and fails the test if that was not possible or if a
// loop device no record accounts for was left over the env's files (which
// it then frees, so a failing test does not leak devices on the host).
func (e *env) cleanup() {
	for _, p := range e.srv.store.all() {
		if _, err := e.srv.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: p.VolumeID, TargetPath: p.TargetPath}); err != nil {
			e.t.Errorf("cleanup: unpublishing %s at %s: %v", p.VolumeID, p.TargetPath, err)
		}
	}
	all, err := loop.Bindings()
	if err != nil {
		e.t.Errorf("cleanup: %v", err)
	}
	for _, b := range all {
		if !strings.HasPrefix(b.Backing, e.dir+"/") {
			continue
		}
		e.t.Errorf("cleanup: %s left over %s", b.Path(), b.Backing)
		d, err := loop.Open(b.Path())
		if err == nil {
			err = d.Remove()
		}
		if err != nil {
			e.t.Errorf("cleanup: freeing %s: %v", b.Path(), err)
		}
	}
	if mounttest.Mentions(e.t, e.dir+"/") > 0 {
		e.t.Errorf("cleanup: mounts left below %s", e.dir)
	}
}

// target returns a target path below the kubelet's pods directory.
func (e *env) target(name string) string {
	return filepath.Join(e.root.Kubelet.Pods.FullPath(), name)
}

func (e *env) create(id string, mode volume.Mode, size int64) {
	e.t.Helper()
	if _, err := e.volumes.Create(context.Background(), id, mode, size); err != nil {
		e.t.Fatal(err)
	}
}

func capability(mode volume.Mode, am csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: am}}
	if mode == volume.Block {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}
	}
	return c
}

const rwo = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER

func (e *env) publish(id, target string, mode volume.Mode, readOnly bool) error {
	_, err := e.srv.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: id, TargetPath: target, VolumeCapability: capability(mode, rwo), Readonly: readOnly,
	})
	return err
}

func (e *env) unpublish(id, target string) error {
	_, err := e.srv.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	return err
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: %v, want %v", what, err, code)
	}
}

// bindings lists the bound loop devices.
func bindings(t *testing.T) []loop.Binding {
	t.Helper()
	all, err := loop.Bindings()
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func isErrno(err error, errnos ...unix.Errno) bool {
	for _, e := range errnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func itoa(n int) string { return strconv.Itoa(n) }

// decodedCondition is the legacy VolumeCondition as a pre-1.13 client
// (the kubelet) decodes it from the wire.
type decodedCondition struct {
	present  bool
	abnormal bool
	message  string
}

// legacyCondition marshals resp as the server would send it and decodes
// field 2 the way a client built against the older spec does.
func legacyCondition(t *testing.T, resp *csi.NodeGetVolumeStatsResponse) decodedCondition {
	t.Helper()
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var c decodedCondition
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad wire data: %v", protowire.ParseError(n))
		}
		b = b[n:]
		if num != 2 || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			b = b[n:]
			continue
		}
		inner, n := protowire.ConsumeBytes(b)
		b = b[n:]
		c.present = true
		for len(inner) > 0 {
			inum, ityp, m := protowire.ConsumeTag(inner)
			inner = inner[m:]
			switch {
			case inum == 1 && ityp == protowire.VarintType:
				v, m := protowire.ConsumeVarint(inner)
				c.abnormal = v != 0
				inner = inner[m:]
			case inum == 2 && ityp == protowire.BytesType:
				s, m := protowire.ConsumeString(inner)
				c.message = s
				inner = inner[m:]
			default:
				inner = inner[protowire.ConsumeFieldValue(inum, ityp, inner):]
			}
		}
	}
	if !c.present {
		t.Fatal("NodeGetVolumeStats response carries no volume condition (field 2)")
	}
	return c
}
