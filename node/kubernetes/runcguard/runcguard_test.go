package runcguard

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGuards decides, from the command lines containerd's runc shim
// gives runc (go-runc), which start a process that gets the filter.
func TestGuards(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("plain/config.json", `{"process":{"capabilities":{"bounding":["CAP_CHOWN","CAP_FOWNER"]}}}`)
	write("admin/config.json", `{"process":{"capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_ADMIN"]}}}`)
	write("nocaps/config.json", `{"process":{"args":["sh"]}}`)
	write("broken/config.json", `{"process":`)
	plainProc := write("plain.json", `{"capabilities":{"bounding":["CAP_FOWNER"]}}`)
	adminProc := write("admin.json", `{"capabilities":{"bounding":["CAP_SYS_ADMIN"]}}`)
	global := []string{"--root", "/run/containerd/runc/k8s.io", "--log", "/run/x/log.json", "--log-format", "json"}
	for _, c := range []struct {
		name    string
		args    []string
		want    bool
		wantErr bool
	}{
		{"create", append(global, "create", "--bundle", dir+"/plain", "--pid-file", "/p", "id"), true, false},
		{"create privileged", append(global, "create", "--bundle", dir+"/admin", "--pid-file", "/p", "id"), false, false},
		{"create without capabilities", append(global, "create", "--bundle="+dir+"/nocaps", "id"), true, false},
		{"create short option", []string{"create", "-b", dir + "/plain", "id"}, true, false},
		{"run", append(global, "--systemd-cgroup", "run", "--bundle", dir+"/plain", "--detach", "id"), true, false},
		{"restore", append(global, "restore", "--bundle", dir+"/plain", "id"), true, false},
		{"exec", append(global, "exec", "--process", plainProc, "--detach", "id"), true, false},
		{"exec privileged", append(global, "exec", "--process", adminProc, "id"), false, false},
		{"exec without process file", append(global, "exec", "id", "sh"), true, false},
		{"start", append(global, "start", "id"), false, false},
		{"delete", append(global, "delete", "--force", "id"), false, false},
		{"rootless", []string{"--rootless=false", "state", "id"}, false, false},
		{"broken config", append(global, "create", "--bundle", dir+"/broken", "id"), false, true},
		{"missing config", append(global, "create", "--bundle", dir+"/none", "id"), false, true},
		{"unknown global option", []string{"--new-option", "x", "create", "--bundle", dir + "/plain", "id"}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Guards(c.args)
			if (err != nil) != c.wantErr {
				t.Fatalf("Guards(%q): error %v, want error %v", c.args, err, c.wantErr)
			}
			if got != c.want {
				t.Errorf("Guards(%q) = %v, want %v", c.args, got, c.want)
			}
		})
	}
}
