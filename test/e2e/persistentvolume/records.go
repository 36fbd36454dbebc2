package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The records modes test what a snapshot holds of a volume being written:
// -append-records PATH writes numbered records to PATH (a file of a
// filesystem volume, or a block volume's device) one after the other,
// each acknowledged (O_DSYNC) before the next is written, and prints how
// many are acknowledged; -check-records PATH reads a copy of that volume
// and says whether it holds a gap-free prefix of them. A copy taken at
// one instant holds every record acknowledged before that instant and
// no record without all those before it.
const (
	markRecordsAcked  = "[RECORDS-ACKED]"
	markRecordsEnded  = "[RECORDS-ENDED]"
	markRecordsPrefix = "[RECORDS-PREFIX]"
	markRecordsGap    = "[RECORDS-GAP]"
	markRecordsFailed = "[RECORDS-FAILED]"
)

// recordSize is one record: a disk sector, so that a record is never torn
// across two of the block device's writes.
const recordSize = 512

// recordsAckEvery is how often the writer says how far it got: often
// enough that the test's last reading before a snapshot is recent.
const recordsAckEvery = 20

// record returns record n: its number in text, a newline, then padding
// that repeats the number, so that a record of another number or a torn
// one does not pass as n.
func record(n int) []byte {
	b := make([]byte, recordSize)
	head := fmt.Sprintf("PLINTH-RECORD %012d\n", n)
	for i := 0; i < len(b); i += len(head) {
		copy(b[i:], head)
	}
	return b
}

// appendRecords writes records 0, 1, 2, ... to path until the volume is
// full or ctx ends, printing markRecordsAcked with the count every
// recordsAckEvery records and markRecordsEnded with the final count.
func appendRecords(ctx context.Context, path string, out io.Writer) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|unix.O_DSYNC, 0o644)
	if err != nil {
		fmt.Fprintf(out, "%s %v\n", markRecordsFailed, err)
		return
	}
	defer f.Close()
	n := 0
	for ctx.Err() == nil {
		if _, err := f.WriteAt(record(n), int64(n)*recordSize); err != nil {
			fmt.Fprintf(out, "%s %d: %v\n", markRecordsEnded, n, err)
			return
		}
		n++
		if n%recordsAckEvery == 0 {
			fmt.Fprintf(out, "%s %d\n", markRecordsAcked, n)
		}
	}
	fmt.Fprintf(out, "%s %d: %v\n", markRecordsEnded, n, ctx.Err())
}

// checkRecords reads path and returns markRecordsPrefix with the number
// of records it holds when they are records 0..n-1 followed by nothing
// but zeros (a block device) or the end (a file), else markRecordsGap
// saying where the prefix ends and what follows it.
func checkRecords(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("%s %v", markRecordsFailed, err)
	}
	defer f.Close()
	buf := make([]byte, recordSize)
	n, prefix := 0, -1
	for ; ; n++ {
		_, err := io.ReadFull(f, buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Sprintf("%s reading record %d: %v", markRecordsFailed, n, err)
		}
		switch {
		case prefix < 0 && string(buf) == string(record(n)):
		case prefix < 0:
			prefix = n
			if !allZero(buf) {
				return fmt.Sprintf("%s record %d is neither record %d nor empty: %q", markRecordsGap, n, n, firstLine(buf))
			}
		case !allZero(buf):
			return fmt.Sprintf("%s records 0..%d, then an empty one, then at %d: %q", markRecordsGap, prefix-1, n, firstLine(buf))
		}
	}
	if prefix < 0 {
		prefix = n
	}
	return markRecordsPrefix + " " + strconv.Itoa(prefix)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

// recordsMain runs the records modes for main; it reports whether
// args named one.
func recordsMain(ctx context.Context, args []string, out io.Writer) bool {
	if len(args) != 2 {
		return false
	}
	switch args[0] {
	case "-append-records":
		appendRecords(ctx, args[1], out)
	case "-check-records":
		fmt.Fprintln(out, checkRecords(args[1]))
	default:
		return false
	}
	<-ctx.Done()
	return true
}
