package main

import (
	"fmt"
	"strings"

	"source.plinth.dev/pkg/fsquota"
)

// Markers of the damage mode (-damage-quota).
const (
	markDamageDone   = "[DAMAGE-DONE]"
	markDamageFailed = "[DAMAGE-FAILED]"
)

// damageQuota does to a volume's directory, from a privileged pod with the
// node's volumes directory mounted, what an administrator's mistake would:
// "clear:DIR" removes its project quota, "raise:DIR" doubles its byte
// limit behind Plinth's back. It returns the line to print.
func damageQuota(spec string) string {
	mode, dir, ok := strings.Cut(spec, ":")
	if !ok || dir == "" {
		return fmt.Sprintf("%s want MODE:DIR, got %q", markDamageFailed, spec)
	}
	var err error
	switch mode {
	case "clear":
		err = fsquota.ClearQuota(dir)
	case "raise":
		var q *fsquota.Quota
		if q, err = fsquota.GetQuota(dir); err == nil {
			err = fsquota.SetQuota(dir, q.ProjectID, fsquota.Limits{Bytes: 2 * q.Limits.Bytes, Inodes: q.Limits.Inodes})
		}
	default:
		err = fmt.Errorf("unknown mode %q (clear, raise)", mode)
	}
	if err != nil {
		return fmt.Sprintf("%s %s: %v", markDamageFailed, spec, err)
	}
	return fmt.Sprintf("%s %s", markDamageDone, spec)
}
