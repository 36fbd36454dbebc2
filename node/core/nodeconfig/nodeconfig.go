// Package nodeconfig is the configuration disk of a booted Plinth node:
// who the node is, how it reaches the network and the cluster.
//
// The disk (plinth.config=<device> on the kernel command line) holds a
// plain, uncompressed tar archive written from its first byte, zero-padded
// to the size of the disk; it has no filesystem. A tar stream needs no
// mount, no filesystem driver in the kernel and no tool on the host to
// write: the host side produces the disk with Write, the node reads it with
// ReadDevice. The archive's end marker (two zero blocks) ends reading, so
// whatever padding follows is never looked at.
//
// Files of the archive (regular files, at its top level, no others):
//   - node.json (required): Node, the node's identity and network.
//   - kubeconfig (optional): the kubelet's credentials. Without it the
//     kubelet runs standalone (static pods only).
//   - plinth-kubeconfig (optional): plinth-node's own credentials. Without
//     it no Kubernetes storage service runs.
//   - kubelet-serving.crt and kubelet-serving.key (optional, both or
//     neither): the kubelet's serving certificate and key (PEM), for an API
//     server that verifies kubelets (--kubelet-certificate-authority, as
//     test/launch's does). Without them the kubelet serves a self-signed
//     certificate it makes itself.
//
// Reading is strict (an unknown file, an unknown JSON field or a value out
// of range is an error naming the file and field), because a node that
// boots with half its configuration ignored is harder to debug than one
// that says at once what is wrong.
package nodeconfig

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"source.plinth.dev/pkg/dnsname"
)

// Names of the files in the archive.
const (
	NodeFile             = "node.json"
	KubeconfigFile       = "kubeconfig"
	PlinthKubeconfigFile = "plinth-kubeconfig"
	KubeletCertFile      = "kubelet-serving.crt"
	KubeletKeyFile       = "kubelet-serving.key"
)

// MaxFileSize bounds each file of the archive. Kubeconfigs with embedded
// certificates are a few KiB; the bound keeps a corrupt header from making
// the node read a whole disk into memory.
const MaxFileSize = 1 << 20

// DefaultKubeletPort is the kubelet's own default port, used when node.json
// leaves kubeletPort out.
const DefaultKubeletPort = 10250

// DefaultClusterDomain is the cluster domain used when node.json leaves
// clusterDomain out (the Kubernetes default).
const DefaultClusterDomain = "cluster.local"

// Node is node.json. IP values are written as strings: "10.0.2.15/24" for
// a prefix, "10.0.2.2" for an address.
type Node struct {
	// NodeName is the Kubernetes node name (a lower-case DNS subdomain);
	// also the host name of the machine.
	NodeName string `json:"nodeName"`
	// Address is eth0's address with its prefix length, e.g. 10.0.2.15/24.
	Address netip.Prefix `json:"address"`
	// Gateway is the default route's next hop; it must lie in Address's
	// subnet.
	Gateway netip.Addr `json:"gateway"`
	// NodeIP is the address the kubelet reports and serves on
	// (--node-ip). The node adds it to lo as a /32, so it need not be
	// routable in the guest network; the host forwards it. Not loopback
	// (the kubelet refuses those), not unspecified.
	NodeIP netip.Addr `json:"nodeIP"`
	// KubeletPort is the kubelet's serving port (default 10250).
	KubeletPort int `json:"kubeletPort,omitempty"`
	// PodCIDR is the range the node's CNI bridge hands pod addresses from.
	PodCIDR netip.Prefix `json:"podCIDR"`
	// ClusterDNS is the cluster's DNS service address given to pods
	// (optional: without it pods get the node's resolv.conf only).
	ClusterDNS netip.Addr `json:"clusterDNS,omitzero"`
	// ClusterDomain is the cluster's DNS domain (default cluster.local).
	ClusterDomain string `json:"clusterDomain,omitempty"`
}

// Config is the whole configuration disk.
type Config struct {
	Node Node
	// Kubeconfig is the kubelet's kubeconfig; nil means standalone.
	Kubeconfig []byte
	// PlinthKubeconfig is plinth-node's kubeconfig; nil means no
	// Kubernetes storage services.
	PlinthKubeconfig []byte
	// KubeletCert and KubeletKey are the kubelet's serving certificate
	// and key (PEM); both nil means a self-signed one.
	KubeletCert, KubeletKey []byte
}

// checkPair checks that the kubelet's certificate and key come together.
func (c *Config) checkPair() error {
	if (c.KubeletCert == nil) != (c.KubeletKey == nil) {
		return fmt.Errorf("%s and %s go together: give both or neither", KubeletCertFile, KubeletKeyFile)
	}
	return nil
}

// Validate checks n and fills in the defaults of the optional fields. The
// error names the field of node.json that is wrong.
func (n *Node) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if err := dnsname.CheckDomain(n.NodeName, 253); err != nil {
		bad("nodeName", "%q is not a DNS subdomain: %v", n.NodeName, err)
	} else if n.NodeName != strings.ToLower(n.NodeName) {
		bad("nodeName", "%q has upper-case letters; Kubernetes node names are lower-case", n.NodeName)
	}
	switch {
	case !n.Address.IsValid():
		bad("address", "missing (want an address with prefix length, e.g. 10.0.2.15/24)")
	case !n.Address.Addr().Is4():
		bad("address", "%s is not IPv4 (the node's network is IPv4 only)", n.Address)
	case n.Address.Addr() == n.Address.Masked().Addr() && n.Address.Bits() < 31:
		bad("address", "%s is the network address of its subnet, not a host address", n.Address)
	}
	switch {
	case !n.Gateway.IsValid():
		bad("gateway", "missing")
	case n.Address.IsValid() && !n.Address.Contains(n.Gateway):
		bad("gateway", "%s is outside eth0's subnet %s, so it cannot be the next hop", n.Gateway, n.Address.Masked())
	case n.Address.IsValid() && n.Gateway == n.Address.Addr():
		bad("gateway", "%s is eth0's own address", n.Gateway)
	}
	switch {
	case !n.NodeIP.IsValid():
		bad("nodeIP", "missing")
	case !n.NodeIP.Is4():
		bad("nodeIP", "%s is not IPv4", n.NodeIP)
	case n.NodeIP.IsLoopback() || n.NodeIP.IsUnspecified() || n.NodeIP.IsMulticast():
		bad("nodeIP", "%s is loopback, unspecified or multicast; the kubelet needs a unicast address", n.NodeIP)
	}
	if n.KubeletPort == 0 {
		n.KubeletPort = DefaultKubeletPort
	} else if n.KubeletPort < 1 || n.KubeletPort > 65535 {
		bad("kubeletPort", "%d is not a TCP port", n.KubeletPort)
	}
	switch {
	case !n.PodCIDR.IsValid():
		bad("podCIDR", "missing (want a range, e.g. 10.244.0.0/24)")
	case !n.PodCIDR.Addr().Is4():
		bad("podCIDR", "%s is not IPv4", n.PodCIDR)
	case n.PodCIDR.Bits() > 30:
		bad("podCIDR", "%s is too small for a bridge, a gateway and pods", n.PodCIDR)
	case n.PodCIDR != n.PodCIDR.Masked():
		bad("podCIDR", "%s has host bits set (did you mean %s?)", n.PodCIDR, n.PodCIDR.Masked())
	case n.Address.IsValid() && n.PodCIDR.Overlaps(n.Address.Masked()):
		bad("podCIDR", "%s overlaps eth0's subnet %s", n.PodCIDR, n.Address.Masked())
	}
	if n.ClusterDNS.IsValid() && !n.ClusterDNS.Is4() {
		bad("clusterDNS", "%s is not IPv4", n.ClusterDNS)
	}
	if n.ClusterDomain == "" {
		n.ClusterDomain = DefaultClusterDomain
	} else if err := dnsname.CheckDomain(n.ClusterDomain, 253); err != nil {
		bad("clusterDomain", "%q is not a domain: %v", n.ClusterDomain, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", NodeFile, err)
	}
	return nil
}

// ParseNode parses and validates node.json. Unknown fields are errors: a
// misspelt key must not silently fall back to a default.
func ParseNode(data []byte) (Node, error) {
	var n Node
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&n); err != nil {
		return Node{}, fmt.Errorf("%s: %w", NodeFile, err)
	}
	if dec.More() {
		return Node{}, fmt.Errorf("%s: trailing data after the JSON object", NodeFile)
	}
	if err := n.Validate(); err != nil {
		return Node{}, err
	}
	return n, nil
}

// Write writes cfg as the archive of a configuration disk to w: node.json
// and the kubeconfigs that are set, then the end marker. The caller pads
// the disk (a raw file, or a device) as it likes; the reader stops at the
// end marker. cfg.Node is validated first, so a host cannot write a disk
// the node would refuse.
func Write(w io.Writer, cfg Config) error {
	n := cfg.Node
	if err := n.Validate(); err != nil {
		return fmt.Errorf("writing node configuration: %w", err)
	}
	if err := cfg.checkPair(); err != nil {
		return fmt.Errorf("writing node configuration: %w", err)
	}
	nodeJSON, err := json.MarshalIndent(n, "", "  ")
	if err != nil {
		return fmt.Errorf("writing node configuration: %w", err)
	}
	files := []struct {
		name string
		data []byte
	}{
		{NodeFile, append(nodeJSON, '\n')},
		{KubeconfigFile, cfg.Kubeconfig},
		{PlinthKubeconfigFile, cfg.PlinthKubeconfig},
		{KubeletCertFile, cfg.KubeletCert},
		{KubeletKeyFile, cfg.KubeletKey},
	}
	tw := tar.NewWriter(w)
	for _, f := range files {
		if f.data == nil {
			continue
		}
		if len(f.data) > MaxFileSize {
			return fmt.Errorf("writing node configuration: %s is %d bytes, more than %d", f.name, len(f.data), MaxFileSize)
		}
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     f.name,
			Size:     int64(len(f.data)),
			// Credentials: readable by root only, wherever they end up.
			Mode:    0o600,
			ModTime: time.Unix(0, 0),
			Format:  tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing node configuration: %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("writing node configuration: %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing node configuration: %w", err)
	}
	return nil
}

// Read reads a configuration archive from r, up to its end marker.
func Read(r io.Reader) (*Config, error) {
	tr := tar.NewReader(r)
	files := map[string][]byte{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading configuration archive: %w", err)
		}
		name := hdr.Name
		switch name {
		case NodeFile, KubeconfigFile, PlinthKubeconfigFile, KubeletCertFile, KubeletKeyFile:
		default:
			return nil, fmt.Errorf("configuration archive: unexpected entry %q (want only %s, %s, %s, %s, %s)",
				name, NodeFile, KubeconfigFile, PlinthKubeconfigFile, KubeletCertFile, KubeletKeyFile)
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("configuration archive: %s is not a regular file (type %q)", name, hdr.Typeflag)
		}
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("configuration archive: %s appears twice", name)
		}
		if hdr.Size > MaxFileSize {
			return nil, fmt.Errorf("configuration archive: %s is %d bytes, more than %d", name, hdr.Size, MaxFileSize)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("configuration archive: reading %s: %w", name, err)
		}
		files[name] = data
	}
	raw, ok := files[NodeFile]
	if !ok {
		if len(files) == 0 {
			return nil, fmt.Errorf("configuration archive is empty (a blank disk?); it needs at least %s", NodeFile)
		}
		return nil, fmt.Errorf("configuration archive has no %s", NodeFile)
	}
	n, err := ParseNode(raw)
	if err != nil {
		return nil, err
	}
	cfg := &Config{
		Node: n, Kubeconfig: files[KubeconfigFile], PlinthKubeconfig: files[PlinthKubeconfigFile],
		KubeletCert: files[KubeletCertFile], KubeletKey: files[KubeletKeyFile],
	}
	if err := cfg.checkPair(); err != nil {
		return nil, fmt.Errorf("configuration archive: %w", err)
	}
	return cfg, nil
}

// ReadDevice reads the configuration disk at path (a block device or a
// file holding the same bytes).
func ReadDevice(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening configuration disk: %w", err)
	}
	defer f.Close()
	cfg, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("configuration disk %s: %w", path, err)
	}
	return cfg, nil
}
