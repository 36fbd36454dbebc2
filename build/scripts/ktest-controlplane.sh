# ktest-controlplane.sh — sourced (not run) by the scripts that boot the
# kernel-test VM (test/ktest) for controller tests or benchmarks:
# test-kernel.sh and bench.sh. One place says what such a VM needs, so the
# two cannot drift apart.
#
# ktest_controlplane ARGS DIR
#   builds a static plinth-node and appends to the array named ARGS the
#   ktest arguments that bring into the VM the control plane's binaries
#   (etcd, kube-apiserver, kube-controller-manager, with their shared
#   libraries: ktest's -with), that plinth-node, the environment that tells
#   the tests where they are (PLINTH_K8S_BIN, PLINTH_NODE_BIN; see
#   test/launch and controllertest), and the memory a control plane needs.
#   The plinth-node goes into a new directory below the cache, whose path
#   is stored in the variable named DIR: the caller removes it. Not below
#   /tmp, which the VM mounts a tmpfs over.
# Run from the repository's root; uses PLINTH_K8S_BIN if set.
ktest_controlplane() {
	local -n ktcp_args=$1 ktcp_dir=$2
	local k8s cache b
	k8s=${PLINTH_K8S_BIN:-$(third_party/kubernetes/build.sh)}
	cache=${PLINTH_CACHE:-$HOME/.cache/plinth}
	mkdir -p "$cache"
	ktcp_dir=$(mktemp -d "$cache/ktest-plinth-node.XXXXXX")
	CGO_ENABLED=0 go build -o "$ktcp_dir/plinth-node" ./node/cmd/plinth-node
	for b in etcd kube-apiserver kube-controller-manager; do
		ktcp_args+=(-with "$k8s/$b")
	done
	# Measured under TCG: the control plane and a test's controllers do
	# not fit the VM's default 1G.
	ktcp_args+=(-with "$ktcp_dir/plinth-node" -env "PLINTH_K8S_BIN=$k8s" -env "PLINTH_NODE_BIN=$ktcp_dir/plinth-node" -m 3G)
}
