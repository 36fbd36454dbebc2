package procfs

import (
	"os"
	"strconv"
	"testing"
)

func TestParseStat(t *testing.T) {
	comm, fields, err := ParseStat("12 (a b) c) S 7 12 12 0 -1 4194560 100\n")
	if err != nil || comm != "a b) c" || len(fields) != 8 || fields[0] != "S" || fields[1] != "7" || fields[6] != "4194560" {
		t.Errorf("ParseStat = %q, %q, %v; want the name \"a b) c\", state S, parent 7, flags 4194560", comm, fields, err)
	}
	for _, bad := range []string{"", "12 S 7", "12 (name)", "12 )x( S"} {
		if _, _, err := ParseStat(bad); err == nil {
			t.Errorf("ParseStat(%q) gave no error", bad)
		}
	}
}

// TestParseStatOfThisProcess reads this process's own stat: its parent
// is the one the kernel names.
func TestParseStatOfThisProcess(t *testing.T) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	_, fields, err := ParseStat(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if ppid, err := strconv.Atoi(fields[1]); err != nil || ppid != os.Getppid() {
		t.Errorf("parent %q, want %d", fields[1], os.Getppid())
	}
}
