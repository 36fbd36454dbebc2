#!/bin/sh
echo "bazel coverage is unavailable offline (no @remote_coverage_tools); use go test -cover" >&2
exit 1
