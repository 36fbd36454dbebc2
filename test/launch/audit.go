package launch

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Auditing: a cluster or control plane can keep the API server's audit log
// of the requests made by members of some groups (Config.AuditGroups,
// ControlPlaneConfig.AuditGroups), so that tests and experiments can see
// exactly which API calls a component made under its own identity, and
// which of them the API server refused. The log is at
// metadata level (who, what verb, which object, what answer; no bodies).

// AuditEvent is what a test reads from one API request's audit record
// (audit.k8s.io/v1 Event, the fields needed).
type AuditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	// Verb is the authorization verb: get, list, watch, create, update,
	// patch, delete, deletecollection.
	Verb string `json:"verb"`
	User struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	// ObjectRef is nil for requests to non-resource URLs (/version, ...).
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// Code is the HTTP status the request was answered with (0 for a watch
// still running).
func (e *AuditEvent) Code() int {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// auditArgs writes the audit policy for the members of groups and for
// users into the control plane's directory and returns the kube-apiserver
// flags that apply it.
func (c *Cluster) auditArgs(groups, users []string) ([]string, error) {
	// A rule without users or groups would match every request.
	var rules []map[string]any
	if len(groups) > 0 {
		rules = append(rules, map[string]any{"level": "Metadata", "userGroups": groups})
	}
	if len(users) > 0 {
		rules = append(rules, map[string]any{"level": "Metadata", "users": users})
	}
	rules = append(rules, map[string]any{"level": "None"})
	policy := map[string]any{
		"apiVersion": "audit.k8s.io/v1",
		"kind":       "Policy",
		// One record when a request is answered, and one when a watch
		// starts (its answer only ends with the watch).
		"omitStages": []string{"RequestReceived"},
		"rules":      rules,
	}
	b, err := json.Marshal(policy)
	if err != nil {
		return nil, fmt.Errorf("encoding audit policy: %w", err)
	}
	p := filepath.Join(c.Dir, "audit-policy.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return nil, fmt.Errorf("writing audit policy: %w", err)
	}
	return []string{
		"--audit-policy-file=" + p,
		"--audit-log-path=" + c.auditLog(),
		"--audit-log-format=json",
		// Each record is written before the request is answered, so a
		// test that has seen an answer finds its record.
		"--audit-log-mode=blocking",
	}, nil
}

func (c *Cluster) auditLog() string { return filepath.Join(c.LogDir, "audit.log") }

// AuditEvents reads the audit log of a cluster or control plane started
// with AuditGroups: one event per request, in the order the requests were
// answered (a watch still running, in its started stage).
func (c *Cluster) AuditEvents() ([]AuditEvent, error) {
	if !c.audited {
		return nil, fmt.Errorf("the cluster keeps no audit log (its AuditGroups are empty)")
	}
	f, err := os.Open(c.auditLog())
	if err != nil {
		return nil, fmt.Errorf("reading audit log: %w", err)
	}
	defer f.Close()
	var events []AuditEvent
	at := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// The last line may be half written.
			continue
		}
		if i, ok := at[e.AuditID]; ok {
			events[i] = e // the later stage of the same request
			continue
		}
		at[e.AuditID] = len(events)
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading audit log: %w", err)
	}
	return slices.Clip(events), nil
}
