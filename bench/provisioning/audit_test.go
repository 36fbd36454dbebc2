package main

import (
	"encoding/json"
	"strings"
	"testing"

	"source.plinth.dev/test/launch"
)

func TestTallyCalls(t *testing.T) {
	var events []launch.AuditEvent
	add := func(user, verb, resource, sub string, times int) {
		for range times {
			var e launch.AuditEvent
			e.User.Username, e.Verb = user, verb
			ref := map[string]string{"resource": resource, "subresource": sub}
			b, _ := json.Marshal(ref)
			if err := json.Unmarshal(b, &e.ObjectRef); err != nil {
				t.Fatal(err)
			}
			events = append(events, e)
		}
	}
	add("system:node:vm", "get", "persistentvolumeclaims", "", 4)
	add("system:node:vm", "get", "persistentvolumes", "", 2)
	add("system:plinth-node:vm", "patch", "persistentvolumeclaims", "status", 1)
	add("system:serviceaccount:kube-system:persistent-volume-binder", "update", "persistentvolumeclaims", "", 3)
	add("system:kube-scheduler", "patch", "persistentvolumeclaims", "", 1)
	var watch launch.AuditEvent
	watch.User.Username, watch.Verb, watch.RequestURI = "admin", "get", "/metrics"
	events = append(events, watch)

	c := tallyCalls(events)
	if c["kubelet"]["get persistentvolumeclaims"] != 4 || c["kubelet"]["get persistentvolumes"] != 2 {
		t.Errorf("kubelet calls %v", c["kubelet"])
	}
	if c["plinth-node"]["patch persistentvolumeclaims/status"] != 1 {
		t.Errorf("plinth-node calls %v; want its status patch with the subresource", c["plinth-node"])
	}
	if c["persistent-volume-binder"]["update persistentvolumeclaims"] != 3 || c["scheduler"]["patch persistentvolumeclaims"] != 1 || c["admin"]["get /metrics"] != 1 {
		t.Errorf("calls %v", c)
	}
	line := c.String()
	if !strings.HasPrefix(line, "kubelet 6 (get persistentvolumeclaims 4, get persistentvolumes 2); persistent-volume-binder 3") {
		t.Errorf("summary %q: want components by their number of calls, the most first", line)
	}
}
