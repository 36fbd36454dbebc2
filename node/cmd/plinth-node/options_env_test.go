package main

import (
	"io"
	"strings"
	"testing"
)

func TestFlagsFromEnvFillOnlyWhatTheCommandLineLeft(t *testing.T) {
	env := map[string]string{
		"PLINTH_KUBE_API_QPS":                "7",
		"PLINTH_KUBE_API_BURST":              "9",
		"PLINTH_ALLOW_UNENFORCED_CAPACITY":   "true",
		"PLINTH_TEST_ONLY_NO_ORPHAN_REMOVAL": "true",
	}
	o := &options{}
	fs := o.flagSet(io.Discard)
	if err := fs.Parse([]string{"--root", "/r", "--kube-api-burst", "11"}); err != nil {
		t.Fatal(err)
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := flagsFromEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if o.kube.QPS != 7 || !o.node.AllowUnenforcedCapacity {
		t.Errorf("from the environment: qps %v, allow-unenforced %v; want 7, true", o.kube.QPS, o.node.AllowUnenforcedCapacity)
	}
	if o.kube.Burst != 11 {
		t.Errorf("burst %d: the command line's 11 must win over the environment's 9", o.kube.Burst)
	}
	if o.kube.TestOnlyNoOrphanRemoval {
		t.Error("a test-only flag was taken from the environment")
	}
	env["PLINTH_KUBE_API_QPS"] = "lots"
	o = &options{}
	fs = o.flagSet(io.Discard)
	_ = fs.Parse(nil)
	if err := flagsFromEnv(fs, lookup); err == nil || !strings.Contains(err.Error(), "PLINTH_KUBE_API_QPS") {
		t.Errorf("a bad value = %v, want an error naming the variable", err)
	}
}
