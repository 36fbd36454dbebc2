package images

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"source.plinth.dev/build/goimage"
)

// DefaultBusybox is where Debian's busybox-static package installs the binary.
const DefaultBusybox = "/bin/busybox"

// Pause builds the pods' sandbox program (node/cmd/pause, the one the
// node image ships) and returns its image. repoRoot is the directory of
// the main module (source.plinth.dev).
func Pause(ctx context.Context, repoRoot string) (Image, error) {
	return goimage.Build(ctx, repoRoot, "./node/cmd/pause", PauseRef)
}

// PersistentVolume builds the e2e test workload
// (test/e2e/persistentvolume) and returns its image, whose entrypoint is
// the workload: a pod gives it only its flags.
func PersistentVolume(ctx context.Context, repoRoot string) (Image, error) {
	return goimage.Build(ctx, repoRoot, "./test/e2e/persistentvolume", PersistentVolumeRef)
}

// Busybox returns an image holding the static busybox binary at
// busyboxPath as /bin/busybox, with a /bin symlink for each applet it
// reports, so `sh`, `dd`, `sleep` and friends are on PATH.
func Busybox(ctx context.Context, busyboxPath string) (Image, error) {
	if err := checkStatic(busyboxPath); err != nil {
		return Image{}, fmt.Errorf("building busybox image: %w (install busybox-static)", err)
	}
	data, err := os.ReadFile(busyboxPath)
	if err != nil {
		return Image{}, fmt.Errorf("building busybox image: %w", err)
	}
	out, err := exec.CommandContext(ctx, busyboxPath, "--list").Output()
	if err != nil {
		return Image{}, fmt.Errorf("building busybox image: listing applets: %w", err)
	}
	files := []File{{Path: "bin/busybox", Mode: 0o755, Data: data}}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		files = append(files, File{Path: "bin/" + applet, Link: "busybox"})
	}
	files = append(files,
		File{Path: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")},
		File{Path: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		File{Path: "root", Mode: 0o700, Dir: true},
	)
	return Image{Ref: BusyboxRef, Cmd: []string{"sh"}, Files: files}, nil
}

// checkStatic fails unless path is an ELF executable without a program
// interpreter: a dynamically linked binary would not run in these images.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", path)
		}
	}
	return nil
}

// Agnhost returns an image of Kubernetes' agnhost test program (the binary
// at agnhostPath, built statically from k8s.io/kubernetes/test/images/agnhost)
// tagged ref, laid out like the upstream image where the e2e suite relies on
// it: /agnhost as entrypoint with "pause" as default command, /agnhost-2 (a
// link the entrypoint tests use), a shell and the busybox applets on PATH
// (the suite's pods run `sh -c`, and its host-exec pods `nsenter`), and the
// user and group the image defines (uid 1000 in gid 50000). Upstream's image
// is Alpine, whose userland is busybox too.
func Agnhost(ctx context.Context, ref, agnhostPath, busyboxPath string) (Image, error) {
	if err := checkStatic(agnhostPath); err != nil {
		return Image{}, fmt.Errorf("building agnhost image: %w (build it with CGO_ENABLED=0)", err)
	}
	data, err := os.ReadFile(agnhostPath)
	if err != nil {
		return Image{}, fmt.Errorf("building agnhost image: %w", err)
	}
	img, err := Busybox(ctx, busyboxPath)
	if err != nil {
		return Image{}, fmt.Errorf("building agnhost image: %w", err)
	}
	img.Ref, img.Entrypoint, img.Cmd = ref, []string{"/agnhost"}, []string{"pause"}
	img.Files = append(img.Files,
		File{Path: "agnhost", Mode: 0o755, Data: data},
		File{Path: "agnhost-2", Link: "agnhost"},
		File{Path: "uploads", Mode: 0o755, Dir: true},
		// Later entries replace Busybox's files of the same path.
		File{Path: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/:/bin/false\n" +
			"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")},
		File{Path: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnogroup:x:65534:\n" +
			"user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n")},
	)
	return img, nil
}
