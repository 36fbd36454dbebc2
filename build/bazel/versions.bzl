"""Pinned versions of the Bazel toolchain, in one place.

build/bazel/gazelle.sh reads GAZELLE_VERSION from this file so that
`make gazelle` runs exactly the gazelle that the Bazel build uses.

Ceilings: Debian 12 ships Bazel 4.2.3 (the only Bazel obtainable offline).
rules_go v0.34.x is the last series for Bazel 4 (v0.35 needs Bazel 5.1), and
v0.34.0 is the last one on the Go module proxy; gazelle v0.26.0 is the last
release that still pairs with rules_go < v0.35.
"""

GO_VERSION = "1.26.8"  # keep equal to the host Go (/usr/local/go)
GO_SDK_SHA256 = "30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7"  # golang.org/toolchain v0.0.1-go1.26.8.linux-amd64.zip

RULES_GO_VERSION = "v0.34.0"
RULES_GO_SHA256 = "c485387052fd81576e104fe12687963f340cc06350936561b9ee4b2ef87ea4e0"

GAZELLE_VERSION = "v0.26.0"
GAZELLE_SHA256 = "7b03ade8beb8a05ee598c149f8c85621c64aecd8d90bfc1b955b8987a2a5c76e"
