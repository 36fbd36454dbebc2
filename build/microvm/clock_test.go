package microvm_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"source.plinth.dev/test/ktest"
)

// TestMain runs this package's tests in the kernel VM too (make
// test-kernel), where TestClockIsFine has something to check.
func TestMain(m *testing.M) { ktest.Main(m) }

// TestClockIsFine: the micro-VM's clock must tell microseconds apart.
// Under TCG the guest judged the TSC unstable and fell back to the
// jiffies clock, so time moved in 4 ms steps and every latency the VM
// benchmarks read (fio's percentiles in bench/audit and bench/datapath
// -node vm) was 0 or a multiple of 4 ms. BaseKernelArgs boots with
// tsc=reliable for it; without that flag this test fails.
func TestClockIsFine(t *testing.T) {
	ktest.RequireVM(t)
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	if err != nil {
		t.Fatal(err)
	}
	if cs := strings.TrimSpace(string(b)); cs != "tsc" {
		t.Errorf("clock source %q, want tsc", cs)
	}
	// The smallest step of CLOCK_MONOTONIC over a few tries.
	step := time.Hour
	for range 10 {
		a := time.Now()
		b := time.Now()
		for b.Sub(a) == 0 {
			b = time.Now()
		}
		step = min(step, b.Sub(a))
	}
	if step > 100*time.Microsecond {
		t.Errorf("the clock moves in steps of %v, want at most 100µs", step)
	}
}
