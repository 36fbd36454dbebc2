#!/usr/bin/env bash
# test-kernel.sh — placeholder until its issue lands; says so instead of pretending.
echo "test-kernel: not built yet (see the open issues)" >&2
