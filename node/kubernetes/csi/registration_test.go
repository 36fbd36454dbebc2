package csi

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/pkg/supervisor"
)

// TestRegistration plays the kubelet's part of plugin registration: it
// reads the plugin info, rejects the registration, and expects the socket
// to be torn down and re-created (the kubelet only retries on a new
// socket). A stale socket from an unclean stop is replaced at start.
func TestRegistration(t *testing.T) {
	e := newEnv(t, "")
	sock, err := e.root.Kubelet.PluginsRegistry.Registration(names.DriverName)
	if err != nil {
		t.Fatal(err)
	}
	// A stale socket: bound, never unlinked, nobody listening.
	if err := os.MkdirAll(filepath.Dir(sock.FullPath()), 0o750); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sock.FullPath()}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)

	r, err := NewRegistrar(&e.root.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	// The socket is gone for the backoff; the check below polls for that
	// gap every 2 ms, so a long one is seen even on a busy machine.
	r.backoff = time.Second
	cancel, _ := supervisor.TestHarness(t, r.Run)
	defer cancel()

	inode := func() uint64 {
		var st unix.Stat_t
		if unix.Stat(sock.FullPath(), &st) != nil {
			return 0
		}
		return st.Ino
	}
	connect := func() registerapi.RegistrationClient {
		t.Helper()
		var conn *grpc.ClientConn
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := grpc.NewClient("unix://"+sock.FullPath(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, "unix", sock.FullPath())
				}))
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err = registerapi.NewRegistrationClient(c).GetInfo(ctx, &registerapi.InfoRequest{})
				cancel()
				if err == nil {
					conn = c
					break
				}
				c.Close()
			}
			if time.Now().After(deadline) {
				t.Fatalf("registration socket never answered: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Cleanup(func() { conn.Close() })
		return registerapi.NewRegistrationClient(conn)
	}
	client := connect()
	info, err := client.GetInfo(context.Background(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	plugin, _ := e.root.Kubelet.Plugins.Driver(names.DriverName)
	if info.Type != registerapi.CSIPlugin || info.Name != names.DriverName || info.Endpoint != plugin.CSISocket.FullPath() || len(info.SupportedVersions) == 0 {
		t.Errorf("GetInfo = %+v", info)
	}
	if _, err := client.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: false, Error: "test rejects"}); err != nil {
		t.Fatal(err)
	}
	// The socket must disappear (for the backoff) and come back: only a
	// new socket makes the kubelet's watcher try again. (Inode numbers
	// are no proof of newness: the filesystem reuses them.)
	deadline := time.Now().Add(5 * time.Second)
	sawGone := false
	for {
		ino := inode()
		if ino == 0 {
			sawGone = true
		}
		if sawGone && ino != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket not torn down and re-created after a failed registration (gone seen: %v)", sawGone)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if _, err := connect().GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Errorf("new registration socket: %v", err)
	}
	cancel()
}
