package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCheckRecordsFindsGaps is the checker's own test: a prefix passes
// with its count, a missing or foreign record in the middle does not.
func TestCheckRecordsFindsGaps(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, recs ...[]byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, bytes.Join(recs, nil), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	zero := make([]byte, recordSize)
	for _, c := range []struct {
		name string
		recs [][]byte
		want string
	}{
		{"empty", nil, markRecordsPrefix + " 0"},
		{"prefix", [][]byte{record(0), record(1), record(2)}, markRecordsPrefix + " 3"},
		{"zeros after", [][]byte{record(0), record(1), zero, zero}, markRecordsPrefix + " 2"},
		{"hole", [][]byte{record(0), zero, record(2)}, markRecordsGap},
		{"skipped", [][]byte{record(0), record(2)}, markRecordsGap},
		{"torn", [][]byte{record(0), append(record(1)[:100:100], zero[100:]...)}, markRecordsGap},
	} {
		if got := checkRecords(write(c.name, c.recs...)); !strings.HasPrefix(got, c.want) || (c.want != markRecordsGap && got != c.want) {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// TestAppendRecordsThenCheck: what the writer writes, the checker reads
// back as a prefix at least as long as the writer's last acknowledgement.
func TestAppendRecordsThenCheck(t *testing.T) {
	p := filepath.Join(t.TempDir(), "records")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	appendRecords(ctx, p, &out)
	if !strings.Contains(out.String(), markRecordsAcked) || !strings.Contains(out.String(), markRecordsEnded) {
		t.Fatalf("the writer printed %q", out.String())
	}
	if got := checkRecords(p); !strings.HasPrefix(got, markRecordsPrefix) {
		t.Errorf("the checker says %s", got)
	}
}
