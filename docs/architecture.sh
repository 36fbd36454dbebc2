#!/usr/bin/env bash
# architecture.sh — regenerates the diagrams of the README and docs/ from
# their Graphviz sources: docs/architecture.dot (plinth-node's supervision
# tree) and docs/dataflow.dot (from a claim to a pod's volume), each into
# the .svg beside it. Installs graphviz first if it is missing. Commit the
# .svg files with the .dot files they come from.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
command -v dot >/dev/null || "$repo/build/scripts/apt-install.sh" graphviz
for src in "$here"/architecture.dot "$here"/dataflow.dot; do
	out=${src%.dot}.svg
	dot -Tsvg "$src" -o "$out.tmp"
	mv "$out.tmp" "$out"
	echo "${out#"$repo"/}"
done
