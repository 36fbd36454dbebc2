package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/node/kubernetes/admission"
	"source.plinth.dev/node/kubernetes/clusterobjects"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/controllertest"
)

// rotation is the world of TestRotationRefusesNoNodeWrite: a real API
// server calling two admission-serve replicas behind a Service, as
// deploy/ runs them, and a node agent writing through them.
type rotation struct {
	t      *testing.T
	client kubernetes.Interface
	ns     string
	// ip is the host's address the replicas listen on (an EndpointSlice
	// may not name a loopback one); ports are theirs.
	ip    string
	ports [2]int
	// procs are the running replicas.
	procs [2]*node
	// dnsName is the name the API server calls them by.
	dnsName string
}

// TestRotationRefusesNoNodeWrite: a rotation of the webhook's own CA
// (the operator deletes its Secret, then the replicas restart one by one,
// as a rollout does) while a node agent keeps creating PVs through a
// real API server that calls two replicas behind a Service (its
// EndpointSlices, resolved by the API server itself, as in a cluster).
// No node write may be refused, and the configuration's caBundle must
// verify each replica's certificate throughout; both replicas end up
// serving the new certificate.
//
// The API server reuses its connections to a webhook, so a replica it
// stopped trusting may go unnoticed by the writes for a while: the test
// also shakes hands with each replica every 100 ms and verifies what it
// presents against the caBundle of that moment.
func TestRotationRefusesNoNodeWrite(t *testing.T) {
	cp := controllertest.ControlPlane(t)
	ctx := t.Context()
	r := &rotation{t: t, client: cp.Client, ns: "rotation"}
	r.dnsName = "plinth-admission." + r.ns + ".svc"
	r.setUp(ctx)
	for i := range r.ports {
		r.start(i)
	}
	for i := range r.ports {
		r.waitServing(ctx, i)
	}

	node := "rotation-node"
	claim := r.placedClaim(ctx, node)
	writes := r.keepWriting(ctx, controllertest.NodeAgentClient(t, node), admission.Probe(node, claim))
	handshakes := r.keepShakingHands(ctx)
	controllertest.Eventually(t, time.Minute, "a node write admitted", func() (bool, error) {
		return writes.ok.Load() > 0, fmt.Errorf("%d refused: %v", writes.refused.Load(), writes.first())
	})
	writes.reset()
	handshakes.reset()
	time.Sleep(2 * time.Second)
	old := r.secretCA(ctx)

	// The rotation: the Secret goes, replica b restarts (the rollout's
	// first step), and a restarts when b serves (its second).
	if err := r.client.CoreV1().Secrets(r.ns).Delete(ctx, "plinth-admission-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	r.restart(ctx, 1)
	// Not fatal: the refusals counted below say more.
	var current []byte
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		current = r.secretCA(ctx)
		if current == nil || string(current) == string(old) {
			return false, nil
		}
		for i := range r.ports {
			if r.servesFrom(i, current) != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("after 90s, the replicas do not both serve a certificate of the Secret's new CA: %v, %v", r.servesFrom(0, current), r.servesFrom(1, current))
	} else {
		t.Logf("both replicas serve the new certificate %.1fs after the Secret was deleted", time.Since(rotated).Seconds())
	}
	r.restart(ctx, 0)
	time.Sleep(3 * time.Second)

	ok, refused := writes.ok.Load(), writes.refused.Load()
	t.Logf("node writes during the rotation: %d admitted, %d refused; handshakes: %d verified, %d not",
		ok, refused, handshakes.ok.Load(), handshakes.failed.Load())
	if refused > 0 {
		t.Errorf("%d node writes refused during the rotation; the first: %v", refused, writes.first())
	}
	if n := handshakes.failed.Load(); n > 0 {
		t.Errorf("%d times a replica presented a certificate the caBundle did not verify; the first: %v", n, handshakes.first())
	}
	if ok < 50 {
		t.Errorf("only %d node writes admitted: the test wrote too little to tell", ok)
	}
	bundle := r.bundle(ctx)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) || !containsPEM(bundle, current) {
		t.Errorf("the caBundle after the rotation lacks the Secret's CA:\n%s", bundle)
	}
}

// setUp makes the namespace, the Service with one EndpointSlice per
// replica (no selector: the test says which replica is ready, as the
// kubelet's probes would), and points both of the server's
// configurations at the Service with no caBundle, as webhook.yaml does.
// The configurations are put back at the end.
func (r *rotation) setUp(ctx context.Context) {
	t := r.t
	r.ip = hostIP(t)
	for i := range r.ports {
		l, err := net.Listen("tcp", net.JoinHostPort(r.ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		r.ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	if _, err := r.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.client.CoreV1().Services(r.ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "plinth-admission"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(9443)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range r.ports {
		r.setReady(ctx, i, true)
	}
	port := int32(443)
	path, labelsPath := clusterobjects.WebhookPath, clusterobjects.ClaimLabelsPath
	validating := r.client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	mutating := r.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	v, err := validating.Get(ctx, clusterobjects.WebhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := mutating.Get(ctx, clusterobjects.ClaimLabelsWebhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		for _, put := range []func() error{
			func() error {
				return putBack(ctx, validating.Get, validating.Update, v.Name, func(c *admissionv1.ValidatingWebhookConfiguration) { c.Webhooks = v.Webhooks })
			},
			func() error {
				return putBack(ctx, mutating.Get, mutating.Update, m.Name, func(c *admissionv1.MutatingWebhookConfiguration) { c.Webhooks = m.Webhooks })
			},
		} {
			if err := put(); err != nil {
				t.Errorf("putting the launcher's webhook back: %v", err)
			}
		}
	})
	vc := v.DeepCopy()
	vc.Webhooks[0].ClientConfig = admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: r.ns, Name: "plinth-admission", Path: &path, Port: &port}}
	if _, err := validating.Update(ctx, vc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	mc := m.DeepCopy()
	mc.Webhooks[0].ClientConfig = admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: r.ns, Name: "plinth-admission", Path: &labelsPath, Port: &port}}
	if _, err := mutating.Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func putBack[T any](ctx context.Context, get func(context.Context, string, metav1.GetOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error), name string, set func(T)) error {
	cur, err := get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	set(cur)
	_, err = update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// setReady writes replica i's EndpointSlice, ready or not.
func (r *rotation) setReady(ctx context.Context, i int, ready bool) {
	name, port, proto := "https", int32(r.ports[i]), corev1.ProtocolTCP
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "replica-" + strconv.Itoa(i), Labels: map[string]string{discoveryv1.LabelServiceName: "plinth-admission"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{r.ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	slices := r.client.DiscoveryV1().EndpointSlices(r.ns)
	cur, err := slices.Get(ctx, slice.Name, metav1.GetOptions{})
	if err == nil {
		slice.ResourceVersion = cur.ResourceVersion
		_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
	} else {
		_, err = slices.Create(ctx, slice, metav1.CreateOptions{})
	}
	if err != nil {
		r.t.Fatal(err)
	}
}

// start runs replica i as deploy/ does, with admin credentials (its
// rights are other tests').
func (r *rotation) start(i int) {
	kubeconfig := controllertest.ControlPlane(r.t).Kubeconfig
	r.procs[i] = startNode(r.t, "admission-serve", "--listen="+r.addr(i), "--kubeconfig="+kubeconfig,
		"--certificate-secret="+r.ns+"/plinth-admission-tls", "--certificate-dns-name="+r.dnsName)
}

// waitServing waits until replica i answers /healthz over TLS, as the
// kubelet's readiness probe asks it (without verifying).
func (r *rotation) waitServing(ctx context.Context, i int) {
	controllertest.Eventually(r.t, time.Minute, fmt.Sprintf("replica %d serving", i), func() (bool, error) {
		_, err := r.presented(i)
		return err == nil, fmt.Errorf("%w\n%s", err, r.procs[i].output())
	})
}

// restart stops replica i as a rollout does (out of the endpoints first,
// then SIGTERM) and starts it again, back in the endpoints once it serves.
func (r *rotation) restart(ctx context.Context, i int) {
	r.setReady(ctx, i, false)
	time.Sleep(time.Second) // the API server's EndpointSlice informer
	if err := r.procs[i].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		r.t.Fatal(err)
	}
	_ = r.procs[i].wait(r.t)
	r.start(i)
	r.waitServing(ctx, i)
	r.setReady(ctx, i, true)
}

// addr is replica i's address.
func (r *rotation) addr(i int) string { return net.JoinHostPort(r.ip, strconv.Itoa(r.ports[i])) }

// hostIP is an IPv4 address of this host outside the loopback range.
func hostIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no IPv4 address outside loopback for the replicas' endpoints")
	return ""
}

// presented is the certificate replica i presents.
func (r *rotation) presented(i int) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", r.addr(i),
		&tls.Config{ServerName: r.dnsName, InsecureSkipVerify: true}) //nolint:gosec // verified by the caller
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// servesFrom says why replica i's certificate is not issued by ca, if it
// is not.
func (r *rotation) servesFrom(i int, ca []byte) error {
	cert, err := r.presented(i)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: r.dnsName}); err != nil {
		return fmt.Errorf("replica %d: %w", i, err)
	}
	return nil
}

// secretCA is the current CA in the Secret, nil if there is none.
func (r *rotation) secretCA(ctx context.Context) []byte {
	s, err := r.client.CoreV1().Secrets(r.ns).Get(ctx, "plinth-admission-tls", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return s.Data["ca.crt"]
}

// bundle is the node-writes configuration's caBundle.
func (r *rotation) bundle(ctx context.Context) []byte {
	v, err := r.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, clusterobjects.WebhookName, metav1.GetOptions{})
	if err != nil || len(v.Webhooks) == 0 {
		return nil
	}
	return v.Webhooks[0].ClientConfig.CABundle
}

// placedClaim is a claim of storage.plinth.dev placed on node.
func (r *rotation) placedClaim(ctx context.Context, node string) *corev1.PersistentVolumeClaim {
	var claim *corev1.PersistentVolumeClaim
	// The claim labels are the replicas' too: retried until the caBundle
	// is set.
	controllertest.Eventually(r.t, time.Minute, "the placed claim created", func() (bool, error) {
		var err error
		claim, err = r.client.CoreV1().PersistentVolumeClaims(r.ns).Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "placed", Annotations: map[string]string{
				"volume.kubernetes.io/storage-provisioner": names.DriverName,
				"volume.kubernetes.io/selected-node":       node,
			}},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
			},
		}, metav1.CreateOptions{})
		return err == nil, err
	})
	return claim
}

// tally counts outcomes and keeps the first failure.
type tally struct {
	ok, refused, failed atomic.Int64
	mu                  sync.Mutex
	err                 error
}

func (c *tally) record(err error, bad *atomic.Int64) {
	if err == nil {
		c.ok.Add(1)
		return
	}
	bad.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = fmt.Errorf("%s: %w", time.Now().Format("15:04:05.000"), err)
	}
}

func (c *tally) first() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *tally) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ok.Store(0)
	c.refused.Store(0)
	c.failed.Store(0)
	c.err = nil
}

// keepWriting has two writers create pv as the node agent (dry runs,
// which the webhook judges as it judges real ones) until the test ends.
func (r *rotation) keepWriting(ctx context.Context, agent kubernetes.Interface, pv *corev1.PersistentVolume) *tally {
	c := &tally{}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	r.t.Cleanup(func() { cancel(); wg.Wait() })
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := agent.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				if ctx.Err() != nil {
					return
				}
				c.record(err, &c.refused)
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	return c
}

// keepShakingHands verifies, every 100 ms, each ready replica's
// certificate against the caBundle of that moment.
func (r *rotation) keepShakingHands(ctx context.Context) *tally {
	c := &tally{}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			bundle := r.bundle(ctx)
			for i := range r.ports {
				slice, err := r.client.DiscoveryV1().EndpointSlices(r.ns).Get(ctx, "replica-"+strconv.Itoa(i), metav1.GetOptions{})
				if err != nil || !*slice.Endpoints[0].Conditions.Ready {
					continue
				}
				if err := r.servesFrom(i, bundle); err != nil && ctx.Err() == nil {
					c.record(err, &c.failed)
				} else if err == nil {
					c.ok.Add(1)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return c
}

// containsPEM says whether the PEM bundle holds the certificate cert
// (PEM).
func containsPEM(bundle, cert []byte) bool {
	want, err := parsePEM(cert)
	if err != nil || len(want) != 1 {
		return false
	}
	have, err := parsePEM(bundle)
	if err != nil {
		return false
	}
	for _, c := range have {
		if c.Equal(want[0]) {
			return true
		}
	}
	return false
}

// parsePEM parses every certificate of a PEM bundle.
func parsePEM(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return certs, nil
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
}
