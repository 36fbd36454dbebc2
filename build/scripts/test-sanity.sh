#!/usr/bin/env bash
# test-sanity.sh — placeholder until its issue lands; says so instead of pretending.
echo "test-sanity: not built yet (see the open issues)" >&2
