package seccomp

// DenyIoctlsFor is DenyIoctls for the architecture goarch, so that a test
// can run every architecture's filter on any of them.
var DenyIoctlsFor = denyIoctls

// Arches are the architectures DenyIoctls has a filter for.
func Arches() []string {
	var a []string
	for arch := range archABIs {
		a = append(a, arch)
	}
	return a
}
