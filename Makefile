# Plinth node storage. The README names two commands: `make run` and `make test`.
# Every target installs what it needs (apt packages, Go tools, Kubernetes
# binaries) idempotently, and caches expensive outputs under $(PLINTH_CACHE).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
export PLINTH_CACHE ?= $(HOME)/.cache/plinth
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: run run-vm test lint test-unit test-fuzz test-kernel test-sanity test-e2e test-storage-e2e test-e2e-vm test-bazel bench gazelle help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

run: ## bring up a local single-node cluster with Plinth storage (Ctrl-C stops it)
	build/scripts/run.sh

run-vm: ## boot a Plinth node image in a qemu VM against a control plane on this host (Ctrl-C stops it)
	build/scripts/run-vm.sh

test: lint test-unit test-fuzz test-kernel test-sanity test-e2e test-storage-e2e test-e2e-vm test-bazel ## every test, as CI runs it

lint: ## gofmt, go vet, staticcheck
	build/scripts/lint.sh

test-unit: ## go test ./... on the host (root-only tests run when root)
	build/scripts/test-unit.sh

test-fuzz: ## every Go fuzz target, a bounded number of inputs each
	build/scripts/test-fuzz.sh

test-kernel: ## quota and loop tests on a real kernel (qemu VM), loop tests also on the host
	build/scripts/test-kernel.sh

test-sanity: ## csi-sanity against `plinth-node csi-serve`, mount and block
	build/scripts/test-sanity.sh

test-e2e: ## a real single-node cluster: kubelet, containerd, plinth-node
	build/scripts/test-e2e.sh

test-storage-e2e: ## Kubernetes' own external-storage e2e suite against Plinth on a real cluster
	build/scripts/test-storage-e2e.sh

test-e2e-vm: ## the node image in a qemu VM, quotas enforced: pods with claims, reboots
	build/scripts/test-e2e-vm.sh

test-bazel: ## bazel test //... (offline except the Go module proxy)
	build/bazel/test.sh

gazelle: ## regenerate BUILD files and deps.bzl from go.mod
	build/bazel/gazelle.sh

.PHONY: node-image
node-image: ## build (or find cached) the node OS image; prints its path and the kernel dir
	build/scripts/nodeimage.sh

.PHONY: image
image: ## build (or find cached) plinth-node's container image for deploy/; prints the OCI archive's path
	build/scripts/image.sh

bench: ## benchmarks, with ratios against baselines measured in the same run
	build/scripts/bench.sh
