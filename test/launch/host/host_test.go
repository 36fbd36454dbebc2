package host

import (
	"os"
	"testing"
)

func TestPPID(t *testing.T) {
	if got, want := ppid(os.Getpid()), os.Getppid(); got != want {
		t.Errorf("ppid(self) = %d, want %d", got, want)
	}
}
