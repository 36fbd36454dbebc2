"""Go repositories that rules_go and gazelle themselves need.

go_rules_dependencies() would http_archive these from GitHub, which is not
reachable. Declaring them first (the first definition of a repository wins)
makes Bazel fetch them through the Go module proxy instead. Each rule carries
`# keep` so `gazelle update-repos` never moves the tooling onto the versions
go.mod asks for: gazelle v0.26.0 imports golang.org/x/tools/go/vcs, which
later x/tools releases deleted.
"""

load("@bazel_gazelle//:deps.bzl", "go_repository")

def toolchain_go_dependencies():
    # keep
    go_repository(
        name = "org_golang_x_tools",
        build_directives = ["gazelle:exclude gopls"],
        build_file_proto_mode = "disable_global",
        importpath = "golang.org/x/tools",
        sum = "h1:loJ25fNOEhSXfHrpoGj91eCUThwdNX6u24rO1xnNteY=",
        version = "v0.1.11",
    )
