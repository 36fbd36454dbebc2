package fsquota_test

import (
	"testing"

	"source.plinth.dev/test/ktest"
)

// TestMain lets `make test-kernel` run these tests in the kernel test VM.
func TestMain(m *testing.M) { ktest.Main(m) }
