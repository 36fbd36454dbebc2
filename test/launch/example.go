package launch

import (
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/images"
)

// ExampleYAML is the PVC + pod that `make run` prints for users to apply:
// a claim of the default StorageClass and a pod that appends to a file on
// it. It lives here, not in the command, so test/e2e applies the very text
// users are shown (with kubectl, as they would).
const ExampleYAML = `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: example
spec:
  storageClassName: ` + names.StorageClassName + `
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
---
apiVersion: v1
kind: Pod
metadata:
  name: example
spec:
  containers:
  - name: writer
    image: ` + images.BusyboxRef + `
    imagePullPolicy: Never
    command: [sh, -c, 'date >> /data/log; df -h /data; sleep 3600']
    volumeMounts:
    - name: data
      mountPath: /data
  volumes:
  - name: data
    persistentVolumeClaim:
      claimName: example
`
