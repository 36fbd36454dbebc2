package launch

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"source.plinth.dev/pkg/dnsname"
	"source.plinth.dev/test/launch/pki"
)

// GuestHostIP is the address of this host as a qemu guest on user
// networking sees it: qemu forwards the guest's connections to it to the
// host's loopback, where the apiserver listens. The apiserver's serving
// certificate names it, so a VM node verifies the apiserver as any node does.
const GuestHostIP = "10.0.2.2"

// RemoteNode is everything a node that runs outside this host's process
// tree (a VM booted from the node image) needs to join the control plane
// with the identities a node has: the kubelet's client credentials
// (system:node:<name>, so the Node authorizer and NodeRestriction apply),
// its serving certificate (the apiserver verifies kubelets against the CA,
// for logs and exec), and plinth-node's restricted node-agent identity.
// All PEM or kubeconfig bytes (the kubeconfigs embed the cluster CA), to be
// handed to the node as files.
type RemoteNode struct {
	Name string
	IP   net.IP
	// KubeletKubeconfig and PlinthKubeconfig reach the apiserver at the
	// server URL given to RemoteNode.
	KubeletKubeconfig []byte
	PlinthKubeconfig  []byte
	KubeletCert       []byte
	KubeletKey        []byte
}

// RemoteNode issues the credentials of a node called name whose kubelet
// serves on ip, with kubeconfigs that reach the apiserver through host
// (an address of this host as the node sees it, e.g. GuestHostIP). A name
// is issued once per control plane.
func (cp *ControlPlane) RemoteNode(name string, ip net.IP, host string) (*RemoteNode, error) {
	if err := dnsname.CheckLabel(name); err != nil {
		return nil, fmt.Errorf("remote node name: %w", err)
	}
	if ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
		// The kubelet refuses such a node IP, and the apiserver could not
		// reach it there.
		return nil, fmt.Errorf("remote node %s: node IP %v is not usable", name, ip)
	}
	if host == "" {
		return nil, errors.New("remote node: empty apiserver host")
	}
	c := cp.Cluster
	kubelet, serving := "node-"+name, "node-"+name+"-serving"
	for _, id := range []pki.Identity{
		{Name: kubelet, CN: "system:node:" + name, Orgs: []string{"system:nodes"}},
		{Name: serving, CN: name, Server: true, DNS: []string{name}, IPs: []net.IP{ip}},
	} {
		if _, err := c.pki.Issue(id); err != nil {
			return nil, fmt.Errorf("remote node %s: %w", name, err)
		}
	}
	agent, err := c.issueNodeAgent(name)
	if err != nil {
		return nil, fmt.Errorf("remote node %s: %w", name, err)
	}
	server := "https://" + net.JoinHostPort(host, strconv.Itoa(c.apiPort))
	n := &RemoteNode{Name: name, IP: ip, KubeletCert: c.pki.Get(serving).CertPEM()}
	if n.KubeletKey, err = c.pki.Get(serving).KeyPEM(); err != nil {
		return nil, fmt.Errorf("remote node %s: %w", name, err)
	}
	if n.KubeletKubeconfig, err = c.kubeconfig(server, kubelet); err != nil {
		return nil, err
	}
	if n.PlinthKubeconfig, err = c.kubeconfig(server, agent); err != nil {
		return nil, err
	}
	return n, nil
}
