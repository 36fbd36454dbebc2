package fanotify

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// event builds one event as the kernel lays it out: metadata, then a
// directory record of typ with handle h and, for DFID_NAME, name.
func event(mask uint64, typ uint8, h Handle, name string) []byte {
	var rec []byte
	if typ != 0 {
		rec = make([]byte, fidHeaderSize, fidHeaderSize+len(h.Bytes)+len(name)+8)
		rec[0] = typ
		binary.NativeEndian.PutUint32(rec[12:], uint32(len(h.Bytes)))
		binary.NativeEndian.PutUint32(rec[16:], uint32(h.Type))
		rec = append(rec, h.Bytes...)
		if typ == unix.FAN_EVENT_INFO_TYPE_DFID_NAME {
			rec = append(rec, name...)
			rec = append(rec, 0)
		}
		for len(rec)%4 != 0 {
			rec = append(rec, 0) // the kernel pads records
		}
		binary.NativeEndian.PutUint16(rec[2:], uint16(len(rec)))
	}
	meta := make([]byte, metadataSize)
	binary.NativeEndian.PutUint32(meta[0:], uint32(metadataSize+len(rec)))
	meta[4] = unix.FANOTIFY_METADATA_VERSION
	binary.NativeEndian.PutUint16(meta[6:], metadataSize)
	binary.NativeEndian.PutUint64(meta[8:], mask)
	binary.NativeEndian.PutUint32(meta[16:], uint32(0xffffffff)) // FAN_NOFD
	return append(meta, rec...)
}

func TestParseReadsDirectoryAndName(t *testing.T) {
	h := Handle{Type: 0x81, Bytes: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}
	buf := append(event(Modify|CloseWrite, unix.FAN_EVENT_INFO_TYPE_DFID_NAME, h, "escape"),
		event(queueOverflow, 0, Handle{}, "")...)
	buf = append(buf, event(Create|OnDir, unix.FAN_EVENT_INFO_TYPE_DFID, h, "")...)
	got, err := parse(buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("parsed %d events, want 3: %+v", len(got), got)
	}
	if e := got[0]; e.Mask != Modify|CloseWrite || e.Name != "escape" || e.Dir.Type != h.Type || !bytes.Equal(e.Dir.Bytes, h.Bytes) || e.Overflow {
		t.Errorf("first event = %+v", e)
	}
	if !got[1].Overflow {
		t.Errorf("second event = %+v, want the overflow", got[1])
	}
	if e := got[2]; e.Name != "" || e.Dir.Key() != h.Key() {
		t.Errorf("third event = %+v, want the directory without a name", e)
	}
}

// TestParseRefusesTruncatedEvents cuts a valid event at every length and
// checks that each cut is an error and never a panic or an event read
// past its end.
func TestParseRefusesTruncatedEvents(t *testing.T) {
	full := event(Modify, unix.FAN_EVENT_INFO_TYPE_DFID_NAME, Handle{Type: 1, Bytes: make([]byte, 8)}, "f")
	for n := 1; n < len(full); n++ {
		buf := bytes.Clone(full[:n])
		if n >= 4 {
			// A length claiming the whole event in a shorter buffer,
			// and one claiming only what is there.
			if _, err := parse(buf); err == nil {
				t.Errorf("%d of %d bytes parsed without an error", n, len(full))
			}
			binary.NativeEndian.PutUint32(buf[0:], uint32(n))
		}
		events, err := parse(buf)
		if err == nil && n >= metadataSize && len(events) == 1 && events[0].Name == "f" {
			t.Errorf("%d of %d bytes gave the whole event %+v", n, len(full), events[0])
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(event(Modify, unix.FAN_EVENT_INFO_TYPE_DFID_NAME, Handle{Type: 1, Bytes: make([]byte, 8)}, "name"))
	f.Add(event(queueOverflow, 0, Handle{}, ""))
	f.Fuzz(func(t *testing.T, buf []byte) {
		events, _ := parse(buf)
		if len(events)*metadataSize > len(buf) {
			t.Fatalf("%d events from %d bytes", len(events), len(buf))
		}
		for _, e := range events {
			if len(e.Dir.Bytes)+len(e.Name) > len(buf) || strings.IndexByte(e.Name, 0) >= 0 {
				t.Fatalf("an event larger than its buffer, or a name with a NUL: %+v", e)
			}
		}
	})
}
