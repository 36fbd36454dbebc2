package main

import (
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"source.plinth.dev/bench/cluster"
	"source.plinth.dev/bench/localpath"
)

// localPathDir is where the volumes local-path would make go.
const localPathDir = "/opt/local-path-provisioner"

// localPathVolume is claim i of local-path's and the PV it would have
// made for it on node, bound to each other: local-path provisions through
// helper pods, which a control plane without a kubelet never runs, so
// its volumes are made as it makes them (v0.0.30's default hostPath
// volume, node affinity to the node, its provisioned-by annotation).
// An idle local-path holds nothing of a volume but these two objects in
// its informers.
func localPathVolume(ns string, i int, node string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	name := fmt.Sprintf("lp%05d", i)
	pvName := "pvc-" + name
	claim := cluster.Claim(ns, name, localpath.Class, localpath.Provisioner, node)
	claim.Spec.VolumeName = pvName
	hostPath := corev1.HostPathDirectoryOrCreate
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": localpath.Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              localpath.Class,
			VolumeMode:                    claim.Spec.VolumeMode,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: filepath.Join(localPathDir, pvName+"_"+ns+"_"+name), Type: &hostPath}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
	return claim, pv
}
