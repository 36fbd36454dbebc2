package csi

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"source.plinth.dev/node/core/volume"
)

// FuzzSizeFor throws arbitrary capacity ranges at sizeFor, with
// CreateVolume's default size and with ControllerExpandVolume's (none).
// Whatever the range:
//   - a size given is a positive multiple of volume.Alignment, at most
//     volume.MaxBytes, at least required_bytes and less than one
//     Alignment above it, at most limit_bytes when that is set; a range
//     that sets neither gets the default, rounded up;
//   - a refusal is InvalidArgument or OutOfRange, and only for a range no
//     correct size fits: a negative bound, or no positive multiple of
//     Alignment from required_bytes to limit_bytes (volume.MaxBytes
//     without a limit). With no default, a range without required_bytes
//     asks for no size, and may be refused.
//
// The seed corpus (the capacity ranges of the controller's tests, and
// the refused ones found so far) runs with every `go test`.
func FuzzSizeFor(f *testing.F) {
	for _, s := range []struct {
		nilRange        bool
		required, limit int64
		dflt            bool
	}{
		{true, 0, 0, true}, {false, 0, 0, true}, {false, 0, 0, false},
		{false, MiB, 0, true}, {false, 16 << 20, 0, false}, {false, 1000, 1000, true},
		{false, 1 << 62, 0, true}, {false, 1 << 50, 0, true}, {false, -1, 0, true}, {false, 0, -1, true},
		{false, 2 * MiB, MiB, false}, {false, 0, 4 * MiB, false}, {false, 1, 1, true},
		{false, volume.MaxBytes, 0, true}, {false, volume.MaxBytes + 1, 0, true},
	} {
		f.Add(s.nilRange, s.required, s.limit, s.dflt)
	}
	f.Fuzz(func(t *testing.T, nilRange bool, required, limit int64, withDefault bool) {
		var r *csi.CapacityRange
		if !nilRange {
			r = &csi.CapacityRange{RequiredBytes: required, LimitBytes: limit}
		} else {
			required, limit = 0, 0
		}
		dflt := int64(0)
		if withDefault {
			dflt = DefaultVolumeSize
		}
		size, err := sizeFor(r, dflt)

		// The largest size the range allows, and the smallest positive
		// multiple of Alignment it needs.
		ceiling := volume.MaxBytes
		if limit > 0 {
			ceiling = min(limit, ceiling)
		}
		floor := max(required, 1)
		fits := required >= 0 && limit >= 0 && floor <= ceiling && (floor+volume.Alignment-1)/volume.Alignment <= ceiling/volume.Alignment

		if err != nil {
			c := status.Code(err)
			if c != codes.InvalidArgument && c != codes.OutOfRange {
				t.Fatalf("sizeFor(%v, %d) = %v: code %v, want InvalidArgument or OutOfRange", r, dflt, err, c)
			}
			if fits && (required > 0 || dflt > 0) {
				t.Fatalf("sizeFor(%v, %d) = %v, but a multiple of %d from %d to %d fits the range", r, dflt, err, volume.Alignment, floor, ceiling)
			}
			return
		}
		switch {
		case !fits:
			t.Fatalf("sizeFor(%v, %d) = %d, for a range nothing fits", r, dflt, size)
		case size <= 0 || size%volume.Alignment != 0 || size > volume.MaxBytes:
			t.Fatalf("sizeFor(%v, %d) = %d: not a positive multiple of %d up to %d", r, dflt, size, volume.Alignment, volume.MaxBytes)
		case size < required:
			t.Fatalf("sizeFor(%v, %d) = %d, below required_bytes", r, dflt, size)
		case required > 0 && size-required >= volume.Alignment:
			t.Fatalf("sizeFor(%v, %d) = %d, more than rounding above required_bytes", r, dflt, size)
		case limit > 0 && size > limit:
			t.Fatalf("sizeFor(%v, %d) = %d, above limit_bytes", r, dflt, size)
		case required == 0 && limit == 0 && size != (dflt+volume.Alignment-1)/volume.Alignment*volume.Alignment:
			t.Fatalf("sizeFor(%v, %d) = %d, want the default", r, dflt, size)
		}
	})
}
