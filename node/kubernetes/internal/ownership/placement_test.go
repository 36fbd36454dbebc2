package ownership

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"source.plinth.dev/node/kubernetes/names"
)

func TestTopologyAdmits(t *testing.T) {
	host := func(values ...string) corev1.TopologySelectorTerm {
		return corev1.TopologySelectorTerm{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
			{Key: names.TopologyKeyHostname, Values: values}}}
	}
	labels := map[string]string{names.TopologyKeyHostname: "a", "zone": "z1"}
	for _, tc := range []struct {
		name   string
		terms  []corev1.TopologySelectorTerm
		labels map[string]string
		want   bool
	}{
		{"no terms", nil, labels, true},
		{"no terms, a node without labels", nil, nil, true},
		{"this host", []corev1.TopologySelectorTerm{host("b", "a")}, labels, true},
		{"another host", []corev1.TopologySelectorTerm{host("b")}, labels, false},
		{"a node without labels", []corev1.TopologySelectorTerm{host("a")}, nil, false},
		{"second term matches", []corev1.TopologySelectorTerm{host("b"), host("a")}, labels, true},
		{"every expression of a term", []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
			{Key: names.TopologyKeyHostname, Values: []string{"a"}}, {Key: "zone", Values: []string{"z2"}}}}}, labels, false},
		{"a label the node lacks", []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
			{Key: "rack", Values: []string{""}}}}}, labels, false},
	} {
		if got := TopologyAdmits(tc.terms, tc.labels); got != tc.want {
			t.Errorf("%s: TopologyAdmits = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBindsImmediately(t *testing.T) {
	mode := func(m storagev1.VolumeBindingMode) *storagev1.VolumeBindingMode { return &m }
	for _, tc := range []struct {
		name string
		mode *storagev1.VolumeBindingMode
		want bool
	}{
		{"unset (defaulted to Immediate)", nil, true},
		{"Immediate", mode(storagev1.VolumeBindingImmediate), true},
		{"WaitForFirstConsumer", mode(storagev1.VolumeBindingWaitForFirstConsumer), false},
	} {
		if got := BindsImmediately(&storagev1.StorageClass{VolumeBindingMode: tc.mode}); got != tc.want {
			t.Errorf("%s: BindsImmediately = %v, want %v", tc.name, got, tc.want)
		}
	}
}
