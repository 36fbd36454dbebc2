#!/usr/bin/env bash
# test-e2e.sh — placeholder until its issue lands; says so instead of pretending.
echo "test-e2e: not built yet (see the open issues)" >&2
