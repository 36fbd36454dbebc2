package nodeconfig

import (
	"archive/tar"
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func validNode() Node {
	return Node{
		NodeName:      "plinth-vm",
		Address:       netip.MustParsePrefix("10.0.2.15/24"),
		Gateway:       netip.MustParseAddr("10.0.2.2"),
		NodeIP:        netip.MustParseAddr("10.0.77.2"),
		KubeletPort:   10250,
		PodCIDR:       netip.MustParsePrefix("10.244.0.0/24"),
		ClusterDNS:    netip.MustParseAddr("10.96.0.10"),
		ClusterDomain: "cluster.local",
	}
}

// TestRoundTripOnPaddedDisk writes a disk the way the host does (archive,
// then zeros up to the disk size) and reads it back as the node does.
func TestRoundTripOnPaddedDisk(t *testing.T) {
	cfg := Config{Node: validNode(), Kubeconfig: []byte("kubelet: yes\n"), PlinthKubeconfig: []byte("plinth: yes\n"),
		KubeletCert: []byte("cert"), KubeletKey: []byte("key")}
	var buf bytes.Buffer
	if err := Write(&buf, cfg); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(t.TempDir(), "config.img")
	padded := append(buf.Bytes(), make([]byte, 4<<20-buf.Len())...)
	if err := os.WriteFile(disk, padded, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDevice(disk)
	if err != nil {
		t.Fatal(err)
	}
	if got.Node != cfg.Node {
		t.Errorf("node = %+v, want %+v", got.Node, cfg.Node)
	}
	if string(got.Kubeconfig) != "kubelet: yes\n" || string(got.PlinthKubeconfig) != "plinth: yes\n" {
		t.Errorf("kubeconfigs = %q, %q", got.Kubeconfig, got.PlinthKubeconfig)
	}
	if string(got.KubeletCert) != "cert" || string(got.KubeletKey) != "key" {
		t.Errorf("kubelet serving pair = %q, %q", got.KubeletCert, got.KubeletKey)
	}
	if err := Write(&bytes.Buffer{}, Config{Node: validNode(), KubeletCert: []byte("cert")}); err == nil || !strings.Contains(err.Error(), "give both or neither") {
		t.Errorf("Write with a certificate and no key: %v", err)
	}
}

// TestContractExample parses the node.json of the contract, without the
// optional fields, and checks the defaults and that the kubeconfigs stay
// absent (standalone kubelet, no storage services).
func TestContractExample(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := `{"nodeName": "plinth-vm", "address": "10.0.2.15/24", "gateway": "10.0.2.2",
	 "nodeIP": "10.0.77.2", "podCIDR": "10.244.0.0/24"}`
	tw.WriteHeader(&tar.Header{Name: NodeFile, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
	tw.Write([]byte(body))
	tw.Close()
	got, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Node.KubeletPort != DefaultKubeletPort || got.Node.ClusterDomain != DefaultClusterDomain || got.Node.ClusterDNS.IsValid() {
		t.Errorf("defaults: %+v", got.Node)
	}
	if got.Node.Address.String() != "10.0.2.15/24" {
		t.Errorf("address = %s, want the host address kept (not masked)", got.Node.Address)
	}
	if got.Kubeconfig != nil || got.PlinthKubeconfig != nil {
		t.Errorf("absent kubeconfigs read as %q, %q", got.Kubeconfig, got.PlinthKubeconfig)
	}
}

func TestNodeValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*Node)
		want   string
	}{
		{"upper-case name", func(n *Node) { n.NodeName = "Plinth" }, "nodeName"},
		{"empty name", func(n *Node) { n.NodeName = "" }, "nodeName"},
		{"no address", func(n *Node) { n.Address = netip.Prefix{} }, "address: missing"},
		{"network address", func(n *Node) { n.Address = netip.MustParsePrefix("10.0.2.0/24") }, "network address"},
		{"ipv6 address", func(n *Node) { n.Address = netip.MustParsePrefix("fd00::2/64") }, "not IPv4"},
		{"gateway off subnet", func(n *Node) { n.Gateway = netip.MustParseAddr("10.0.3.1") }, "outside eth0's subnet"},
		{"gateway is self", func(n *Node) { n.Gateway = netip.MustParseAddr("10.0.2.15") }, "own address"},
		{"loopback node ip", func(n *Node) { n.NodeIP = netip.MustParseAddr("127.0.0.2") }, "loopback"},
		{"no node ip", func(n *Node) { n.NodeIP = netip.Addr{} }, "nodeIP: missing"},
		{"port", func(n *Node) { n.KubeletPort = 70000 }, "kubeletPort"},
		{"pod cidr host bits", func(n *Node) { n.PodCIDR = netip.MustParsePrefix("10.244.0.1/24") }, "did you mean 10.244.0.0/24"},
		{"pod cidr overlaps", func(n *Node) { n.PodCIDR = netip.MustParsePrefix("10.0.0.0/16") }, "overlaps"},
		{"pod cidr tiny", func(n *Node) { n.PodCIDR = netip.MustParsePrefix("10.244.0.0/31") }, "too small"},
		{"domain", func(n *Node) { n.ClusterDomain = "bad..domain" }, "clusterDomain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := validNode()
			tc.modify(&n)
			err := n.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), NodeFile+": ") {
				t.Fatalf("Validate() = %v, want an error about %q prefixed by %s", err, tc.want, NodeFile)
			}
			// Write refuses what the node would refuse.
			if err := Write(&bytes.Buffer{}, Config{Node: n}); err == nil {
				t.Error("Write accepted an invalid node")
			}
		})
	}
	n := validNode()
	if err := n.Validate(); err != nil {
		t.Fatalf("valid node refused: %v", err)
	}
}

func TestParseNodeStrict(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"nodeName":"a","adress":"10.0.2.15/24"}`, `unknown field "adress"`},
		{`{"nodeName":"a","address":"10.0.2.15"}`, `no '/'`},
		{`{"nodeName":"a"} {}`, "trailing data"},
		{`not json`, "invalid character"},
	} {
		_, err := ParseNode([]byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseNode(%s) = %v, want an error containing %q", tc.body, err, tc.want)
		}
	}
}

func TestReadRejects(t *testing.T) {
	archive := func(entries ...tar.Header) *bytes.Buffer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range entries {
			body := make([]byte, h.Size)
			if h.Name == NodeFile {
				js := []byte(`{"nodeName":"n","address":"10.0.2.15/24","gateway":"10.0.2.2","nodeIP":"10.0.77.2","podCIDR":"10.244.0.0/24"}`)
				body, h.Size = js, int64(len(js))
			}
			if err := tw.WriteHeader(&h); err != nil {
				t.Fatal(err)
			}
			tw.Write(body)
		}
		tw.Close()
		return &buf
	}
	reg := func(name string) tar.Header {
		return tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Size: 3}
	}
	for _, tc := range []struct {
		name string
		r    *bytes.Buffer
		want string
	}{
		{"blank disk", bytes.NewBuffer(make([]byte, 1<<20)), "empty (a blank disk?)"},
		{"no node.json", archive(reg(KubeconfigFile)), "has no node.json"},
		{"unknown file", archive(reg(NodeFile), reg("extra")), `unexpected entry "extra"`},
		{"nested path", archive(reg("dir/" + NodeFile)), "unexpected entry"},
		{"duplicate", archive(reg(NodeFile), reg(NodeFile)), "appears twice"},
		{"key without certificate", archive(reg(NodeFile), reg(KubeletKeyFile)), "give both or neither"},
		{"symlink", archive(tar.Header{Name: KubeconfigFile, Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}), "not a regular file"},
		{"huge", archive(tar.Header{Name: KubeconfigFile, Typeflag: tar.TypeReg, Size: MaxFileSize + 1}), "more than"},
		{"garbage", bytes.NewBufferString(strings.Repeat("x", 1024)), "reading configuration archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(tc.r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
