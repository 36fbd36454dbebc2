package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/test/launch"
)

// auditedGroups are the groups whose requests -audit logs: every
// authenticated client, so each component's calls can be told apart.
var auditedGroups = []string{"system:authenticated"}

// component names who made an audited request: the kubelet, plinth-node,
// the controller manager's controllers (each with its own service
// account), the scheduler, or the user's name (the benchmark is admin).
func component(user string) string {
	switch {
	case strings.HasPrefix(user, "system:node:"):
		return "kubelet"
	case strings.HasPrefix(user, clusterobjects.NodeAgentUserPrefix):
		return "plinth-node"
	case strings.HasPrefix(user, "system:serviceaccount:kube-system:"):
		return strings.TrimPrefix(user, "system:serviceaccount:kube-system:")
	case user == "system:kube-scheduler":
		return "scheduler"
	}
	return user
}

// apiCalls counts audited requests by component, then by verb and
// resource (with its subresource).
type apiCalls map[string]map[string]int

func tallyCalls(events []launch.AuditEvent) apiCalls {
	c := apiCalls{}
	for _, e := range events {
		what := e.Verb
		if r := e.ObjectRef; r != nil {
			what += " " + r.Resource
			if r.Subresource != "" {
				what += "/" + r.Subresource
			}
		} else {
			what += " " + e.RequestURI
		}
		who := component(e.User.Username)
		if c[who] == nil {
			c[who] = map[string]int{}
		}
		c[who][what]++
	}
	return c
}

// String lists the components by their number of calls, each with its
// most frequent calls.
func (c apiCalls) String() string {
	const top = 5
	total := func(m map[string]int) int {
		n := 0
		for _, v := range m {
			n += v
		}
		return n
	}
	who := slices.SortedFunc(maps.Keys(c), func(a, b string) int {
		return cmp.Or(cmp.Compare(total(c[b]), total(c[a])), cmp.Compare(a, b))
	})
	var parts []string
	for _, w := range who {
		calls := slices.SortedFunc(maps.Keys(c[w]), func(a, b string) int {
			return cmp.Or(cmp.Compare(c[w][b], c[w][a]), cmp.Compare(a, b))
		})
		var each []string
		for i, k := range calls {
			if i == top {
				each = append(each, "...")
				break
			}
			each = append(each, fmt.Sprintf("%s %d", k, c[w][k]))
		}
		parts = append(parts, fmt.Sprintf("%s %d (%s)", w, total(c[w]), strings.Join(each, ", ")))
	}
	return strings.Join(parts, "; ")
}
