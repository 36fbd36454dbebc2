package initramfs

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"testing"
)

type entry struct {
	name         string
	mode         uint32
	data         string
	rmaj, rminor uint32
}

// parse reads a newc archive back, checking the 4-byte alignment.
func parse(t *testing.T, b []byte) []entry {
	t.Helper()
	var out []entry
	off := 0
	field := func(i int) uint32 {
		v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("header field %d at %d: %v", i, off, err)
		}
		return uint32(v)
	}
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if string(b[off:off+6]) != "070701" {
			t.Fatalf("bad magic at %d: %q", off, b[off:off+6])
		}
		mode, size, rmaj, rmin, nameLen := field(1), int(field(6)), field(9), field(10), int(field(11))
		name := string(b[off+110 : off+110+nameLen-1])
		dataOff := align(off + 110 + nameLen)
		data := string(b[dataOff : dataOff+size])
		off = align(dataOff + size)
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, entry{name, mode, data, rmaj, rmin})
	}
}

func TestWriterEmitsParentsFirst(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.CharDev("/dev/console", 5, 1)
	w.File("/ktest/tests/a.test", 0o755, []byte("abc"))
	w.File("ktest/tests/b.test", 0o644, []byte("defgh"))
	w.Dir("proc")
	w.Dir("proc")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := parse(t, buf.Bytes())
	want := []entry{
		{"dev", 0o040755, "", 0, 0},
		{"dev/console", 0o020600, "", 5, 1},
		{"ktest", 0o040755, "", 0, 0},
		{"ktest/tests", 0o040755, "", 0, 0},
		{"ktest/tests/a.test", 0o100755, "abc", 0, 0},
		{"ktest/tests/b.test", 0o100644, "defgh", 0, 0},
		{"proc", 0o040755, "", 0, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("entries:\n got %v\nwant %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestStripSignature(t *testing.T) {
	body := []byte("\x7fELF module body")
	sig := []byte("SIGNATURE-BYTES")
	var info [12]byte
	binary.BigEndian.PutUint32(info[8:], uint32(len(sig)))
	signed := append(append(append(append([]byte{}, body...), sig...), info[:]...), sigMagic...)
	if got := StripSignature(signed); !bytes.Equal(got, body) {
		t.Errorf("StripSignature = %q, want %q", got, body)
	}
	if got := StripSignature(body); !bytes.Equal(got, body) {
		t.Errorf("unsigned module changed: %q", got)
	}
	broken := append([]byte("x"), info[:]...)
	binary.BigEndian.PutUint32(broken[9:], 1000)
	broken = append(broken, sigMagic...)
	if got := StripSignature(broken); !bytes.Equal(got, broken) {
		t.Errorf("a bogus signature length cut the module: %q", got)
	}
}

func TestReadRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.File("usr/bin/x", 0o755, []byte("12345"))
	w.Symlink("bin/sh", "busybox")
	w.CharDev("dev/console", 5, 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := Read(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{"usr", TypeDir | 0o755, nil},
		{"usr/bin", TypeDir | 0o755, nil},
		{"usr/bin/x", TypeFile | 0o755, []byte("12345")},
		{"bin", TypeDir | 0o755, nil},
		{"bin/sh", TypeLink | 0o777, []byte("busybox")},
		{"dev", TypeDir | 0o755, nil},
		{"dev/console", TypeChar | 0o600, nil},
	}
	if len(got) != len(want) {
		t.Fatalf("Read = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Mode != want[i].Mode || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// The writer's own parser (parse) agrees on the symlink.
	if p := parse(t, buf.Bytes()); p[4].data != "busybox" || p[4].mode != TypeLink|0o777 {
		t.Errorf("parse saw the symlink as %+v", p[4])
	}
	if _, err := Read(buf.Bytes()[:buf.Len()-200]); err == nil {
		t.Error("Read accepted a truncated archive")
	}
}
