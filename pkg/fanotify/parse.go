package fanotify

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Layout of what read(2) returns on a fanotify group reporting file
// handles (linux/fanotify.h): events one after another, each a
// struct fanotify_event_metadata followed by information records.
const (
	// metadataSize is sizeof(struct fanotify_event_metadata):
	// event_len u32, vers u8, reserved u8, metadata_len u16, mask u64,
	// fd s32, pid s32.
	metadataSize = 24
	// infoHeaderSize is sizeof(struct fanotify_event_info_header):
	// info_type u8, pad u8, len u16.
	infoHeaderSize = 4
	// fidHeaderSize is what precedes the file handle's bytes in a
	// struct fanotify_event_info_fid: the header, fsid (2 x s32), and
	// the struct file_handle's handle_bytes u32 and handle_type s32.
	fidHeaderSize = infoHeaderSize + 8 + 8
)

// parse decodes the events in buf. An event that does not fit its own
// length, or a version the package does not know, is an error: the rest
// of the buffer cannot be trusted then.
func parse(buf []byte) ([]Event, error) {
	var events []Event
	for len(buf) > 0 {
		if len(buf) < metadataSize {
			return events, fmt.Errorf("parsing fanotify events: %d bytes left, shorter than an event", len(buf))
		}
		length := int(binary.NativeEndian.Uint32(buf[0:]))
		version := buf[4]
		metaLen := int(binary.NativeEndian.Uint16(buf[6:]))
		if version != unix.FANOTIFY_METADATA_VERSION {
			return events, fmt.Errorf("parsing fanotify events: metadata version %d, want %d", version, unix.FANOTIFY_METADATA_VERSION)
		}
		if length < metadataSize || length > len(buf) || metaLen < metadataSize || metaLen > length {
			return events, fmt.Errorf("parsing fanotify events: event length %d (metadata %d) does not fit the %d bytes left", length, metaLen, len(buf))
		}
		ev := Event{Mask: binary.NativeEndian.Uint64(buf[8:]), fd: int32(binary.NativeEndian.Uint32(buf[16:]))}
		ev.Overflow = ev.Mask&queueOverflow != 0
		if err := parseInfo(&ev, buf[metaLen:length]); err != nil {
			return events, err
		}
		events = append(events, ev)
		buf = buf[length:]
	}
	return events, nil
}

// parseInfo decodes an event's information records into ev: the
// directory's handle and, when there is one, the entry's name. Records
// of other types are skipped.
func parseInfo(ev *Event, info []byte) error {
	for len(info) > 0 {
		if len(info) < infoHeaderSize {
			return fmt.Errorf("parsing fanotify events: %d bytes left, shorter than an information record", len(info))
		}
		typ := info[0]
		length := int(binary.NativeEndian.Uint16(info[2:]))
		if length < infoHeaderSize || length > len(info) {
			return fmt.Errorf("parsing fanotify events: information record length %d does not fit the %d bytes left", length, len(info))
		}
		rec := info[:length]
		info = info[length:]
		if typ != unix.FAN_EVENT_INFO_TYPE_DFID_NAME && typ != unix.FAN_EVENT_INFO_TYPE_DFID {
			continue
		}
		if len(rec) < fidHeaderSize {
			return fmt.Errorf("parsing fanotify events: directory record of %d bytes, shorter than its header", len(rec))
		}
		size := int(binary.NativeEndian.Uint32(rec[12:]))
		if size > len(rec)-fidHeaderSize {
			return fmt.Errorf("parsing fanotify events: a file handle of %d bytes in a record of %d", size, len(rec))
		}
		ev.Dir = Handle{
			Type:  int32(binary.NativeEndian.Uint32(rec[16:])),
			Bytes: bytes.Clone(rec[fidHeaderSize : fidHeaderSize+size]),
		}
		if typ == unix.FAN_EVENT_INFO_TYPE_DFID_NAME {
			name := rec[fidHeaderSize+size:]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			ev.Name = string(name)
		}
	}
	return nil
}
