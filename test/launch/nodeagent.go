package launch

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/pkg/dnsname"
	"source.plinth.dev/test/launch/pki"
)

// KubeconfigClient is a client of the cluster as the kubeconfig file at
// path says: a node agent's identity (NodeKubeconfig, NodeAgentKubeconfig)
// for what a node may do.
func KubeconfigClient(path string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", path, err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building a client from %s: %w", path, err)
	}
	return c, nil
}

// nodeAgentCert is the name of the certificate of plinth-node on node.
func nodeAgentCert(node string) string { return "node-" + node + "-plinth" }

// maxAgentNode is the longest node name issueNodeAgent takes: a node
// name may be longer than a label value (up to 253 characters, a DNS
// subdomain), and tests of such nodes need their agents; the name is part
// of file names (nodeAgentCert, plus ".kubeconfig"), which a file system
// bounds at 255 bytes.
const maxAgentNode = 200

// issueNodeAgent issues the node-agent identity of node (CN
// system:plinth-node:<node>, in the node agents' group) unless it exists,
// and returns its certificate's name.
func (c *Cluster) issueNodeAgent(node string) (string, error) {
	if err := dnsname.CheckDomain(node, maxAgentNode); err != nil {
		return "", fmt.Errorf("node agent identity: %w", err)
	}
	name := nodeAgentCert(node)
	if _, err := c.pki.Ensure(pki.Identity{Name: name, CN: clusterobjects.NodeAgentUser(node), Orgs: []string{plinthNodeGroup}}); err != nil {
		return "", fmt.Errorf("node agent identity of %s: %w", node, err)
	}
	return name, nil
}

// NodeAgentKubeconfig is the kubeconfig file of plinth-node serving node:
// that node's own identity (system:plinth-node:<node>), so that the API
// server authenticates, audits and admits each node's requests as that
// node's, as a real cluster's would, where NodeKubeconfig is one identity
// for every node of a test. The file is written once; later calls for the
// same node return it, so a process reading it never sees it rewritten.
func (c *Cluster) NodeAgentKubeconfig(node string) (string, error) {
	c.agentsMu.Lock()
	defer c.agentsMu.Unlock()
	if path, ok := c.agentKubeconfigs[node]; ok {
		return path, nil
	}
	name, err := c.issueNodeAgent(node)
	if err != nil {
		return "", err
	}
	path := c.kubeconfigPath(name)
	if err := c.writeKubeconfig(path, name); err != nil {
		return "", err
	}
	if c.agentKubeconfigs == nil {
		c.agentKubeconfigs = map[string]string{}
	}
	c.agentKubeconfigs[node] = path
	return path, nil
}
