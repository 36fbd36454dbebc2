// Package procfs reads what the kernel reports of a process in /proc.
package procfs

import (
	"fmt"
	"strings"
)

// ParseStat splits the contents of /proc/PID/stat into the command name
// (comm) and the fields after it. The name is in parentheses and may
// itself hold spaces and parentheses, so it ends at the last ')'.
// fields[0] is the state, field 3 of proc(5); field n of proc(5) is
// fields[n-3].
func ParseStat(stat string) (comm string, fields []string, err error) {
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", nil, fmt.Errorf("malformed stat %q", stat)
	}
	fields = strings.Fields(stat[end+1:])
	if len(fields) == 0 {
		return "", nil, fmt.Errorf("malformed stat %q: nothing after the command name", stat)
	}
	return stat[open+1 : end], fields, nil
}
