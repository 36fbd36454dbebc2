package images

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// FioRef is the image of the flexible I/O tester, the data-path
// benchmark's workload (bench/datapath).
const FioRef = "plinth.local/fio:1"

// DefaultFio is where Debian's fio package installs the binary.
const DefaultFio = "/usr/bin/fio"

// Fio returns an image holding the fio binary at fioPath with every shared
// library it loads and the program loader, each at the path the host's
// loader resolves it to, so that the container runs the very binary the
// node runs for the benchmark's floor. Debian's fio is dynamically linked
// (its rbd, gluster and nbd engines pull in some 80 MB of libraries); a
// static build would be a second fio, measured beside a different one.
func Fio(ctx context.Context, fioPath string) (Image, error) {
	libs, err := sharedLibraries(ctx, fioPath)
	if err != nil {
		return Image{}, fmt.Errorf("building fio image: %w (install fio)", err)
	}
	data, err := os.ReadFile(fioPath)
	if err != nil {
		return Image{}, fmt.Errorf("building fio image: %w", err)
	}
	files := []File{{Path: "usr/bin/fio", Mode: 0o755, Data: data}}
	for _, lib := range libs {
		// The file itself, not the link ldd names: the image has
		// no other copy for the link to point at.
		b, err := os.ReadFile(lib)
		if err != nil {
			return Image{}, fmt.Errorf("building fio image: %w", err)
		}
		files = append(files, File{Path: strings.TrimPrefix(lib, "/"), Mode: 0o755, Data: b})
	}
	files = append(files, File{Path: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/false\n")})
	return Image{Ref: FioRef, Entrypoint: []string{"/usr/bin/fio"}, Files: files}, nil
}

// sharedLibraries lists the absolute paths of the libraries and the loader
// the binary at path needs, as ldd resolves them on this host.
func sharedLibraries(ctx context.Context, path string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", path).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", path, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)",
		// "/lib64/ld-linux-x86-64.so.2 (0x...)", or the vDSO with
		// no file at all.
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && filepath.IsAbs(f[2]):
			libs = append(libs, f[2])
		case len(f) >= 3 && f[1] == "=>":
			return nil, fmt.Errorf("ldd %s: %s: %s", path, f[0], strings.Join(f[2:], " "))
		case len(f) == 2 && filepath.IsAbs(f[0]):
			libs = append(libs, f[0])
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd %s: no shared libraries listed (a static binary needs no fio image of this kind)", path)
	}
	return libs, nil
}
