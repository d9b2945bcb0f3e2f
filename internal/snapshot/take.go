package snapshot

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/controlplane"
)

// TakeOptions say how Take seals and stages a snapshot.
type TakeOptions struct {
	// Recipients are the age recipients the PKI is encrypted to; with none,
	// PlaintextKeys must be set (Write).
	Recipients    []age.Recipient
	PlaintextKeys bool
	// NestVersion is written in the manifest.
	NestVersion string
	// TempDir stages etcd's snapshot and the volumes' data, unencrypted,
	// mode 0600, while the archive is written ("" is the system's).
	TempDir string
	// IncludeVolumes copies the files of every bound tenant claim into the
	// snapshot (packVolumes); without it the claims are listed, and come
	// back empty.
	IncludeVolumes bool
}

// Take writes a snapshot of the VirtualCluster key to w (Write's archive)
// and returns its manifest. etcd's snapshot comes from the first Ready
// control-plane pod whose member answers etcd's maintenance API, reached
// through the host API server's port forwarding (cfg) on a loopback port,
// with the etcd client certificate of the tenant's PKI: no pause, no
// restart. The VirtualCluster goes in without its status and without
// spec.kubeconfig, which holds the admin's key; the PKI Secret's data goes
// in sealed. The tenant's claims go in as the manifest's Volumes and, with
// o.IncludeVolumes, their files, each copied after etcd's snapshot by a
// short-lived copy pod that mounts its host claim read-only: file by file
// while the tenant runs, so a volume written meanwhile is copied as a
// crash would leave it, and a tenant whose host namespace enforces the
// restricted Pod Security level is refused (checkVolumesCopyable).
func Take(ctx context.Context, host client.Client, cfg *rest.Config, key types.NamespacedName, w io.Writer, o TakeOptions) (Manifest, error) {
	// Before anything is read or dialled.
	if err := CheckKeys(o.Recipients, o.PlaintextKeys); err != nil {
		return Manifest{}, err
	}
	vc := &nestv1.VirtualCluster{}
	if err := host.Get(ctx, key, vc); err != nil {
		if apierrors.IsNotFound(err) {
			return Manifest{}, fmt.Errorf("NAME %q: no VirtualCluster %s: nest list shows them; -n names the host namespace", key.Name, key)
		}
		return Manifest{}, err
	}
	if o.IncludeVolumes {
		if err := checkVolumesCopyable(vc); err != nil {
			return Manifest{}, err
		}
	}
	n := controlplane.NamesOf(vc)
	pki := &corev1.Secret{}
	if err := host.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: n.PKISecret()}, pki); err != nil {
		return Manifest{}, fmt.Errorf("the PKI Secret of %s: %w", key, err)
	}
	tlsConfig, err := etcdClientTLS(pki.Data)
	if err != nil {
		return Manifest{}, err
	}
	etcd, err := os.CreateTemp(o.TempDir, "nest-etcd-*.db")
	if err != nil {
		return Manifest{}, err
	}
	defer os.Remove(etcd.Name())
	defer etcd.Close()
	member, revision, err := snapshotAMember(ctx, host, cfg, vc, tlsConfig, etcd)
	if err != nil {
		return Manifest{}, err
	}
	// After etcd's snapshot: a claim made meanwhile is in etcd and listed
	// too.
	claims, err := tenantClaims(ctx, host, vc)
	if err != nil {
		return Manifest{}, err
	}
	volumes, volumePaths := make([]Volume, len(claims)), make([]string, len(claims))
	for i := range claims {
		volumes[i] = volumeOf(&claims[i])
	}
	if o.IncludeVolumes && len(claims) > 0 {
		pod := &corev1.Pod{}
		if err := host.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: member}, pod); err != nil {
			return Manifest{}, err
		}
		cp, err := copierOf(pod)
		if err != nil {
			return Manifest{}, err
		}
		if volumes, volumePaths, err = packVolumes(ctx, host, cfg, vc, cp, claims, o.TempDir); err != nil {
			return Manifest{}, err
		}
		defer func() {
			for _, p := range volumePaths {
				if p != "" {
					os.Remove(p)
				}
			}
		}()
	}
	vcJSON, err := json.Marshal(portable(vc))
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{
		NestVersion: o.NestVersion, KubernetesVersion: controlplane.RunningVersion(vc),
		Namespace: key.Namespace, VirtualCluster: key.Name,
		Created: time.Now().UTC().Truncate(time.Second), EtcdRevision: revision, Member: member,
		Volumes: volumes, Address: addressOf(ctx, host, n),
	}
	return Write(w, m, Contents{VirtualCluster: vcJSON, PKI: pki.Data, EtcdPath: etcd.Name(), VolumePaths: volumePaths}, o.Recipients, o.PlaintextKeys)
}

// portable is vc as a snapshot keeps it: its name, namespace, labels,
// annotations and spec, without spec.kubeconfig (the admin's key), its
// status, or the one-shot annotations nest.dev/snapshot-requested,
// nest.dev/restoring, nest.dev/requested-address and
// nest.dev/rotate-certificates (served with a status a restore does not
// bring back).
func portable(vc *nestv1.VirtualCluster) *nestv1.VirtualCluster {
	out := &nestv1.VirtualCluster{
		TypeMeta: metav1.TypeMeta{APIVersion: nestv1.GroupVersion.String(), Kind: nestv1.VirtualClusterKind},
		ObjectMeta: metav1.ObjectMeta{Name: vc.Name, Namespace: vc.Namespace,
			Labels: maps.Clone(vc.Labels), Annotations: maps.Clone(vc.Annotations)},
		Spec: *vc.Spec.DeepCopy(),
	}
	out.Spec.Kubeconfig = ""
	// One-shot marks of the running tenant, not part of it.
	for _, a := range []string{nestv1.AnnotationSnapshotRequested, nestv1.AnnotationRestoring, nestv1.AnnotationRequestedAddress, nestv1.AnnotationRotateCertificates, nestv1.AnnotationRotateCA, nestv1.AnnotationFinishCARotation} {
		delete(out.Annotations, a)
	}
	return out
}

// addressOf is the LoadBalancer address and node port of the tenant's
// Service, or nil when it has neither (or cannot be read: the snapshot
// goes on, and a restore lets the host pick).
func addressOf(ctx context.Context, host client.Client, n controlplane.Names) *nestv1.RequestedAddress {
	svc := &corev1.Service{}
	if err := host.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.Service()}, svc); err != nil {
		return nil
	}
	a := &nestv1.RequestedAddress{}
	if len(svc.Spec.Ports) > 0 {
		a.NodePort = svc.Spec.Ports[0].NodePort
	}
	if in := svc.Status.LoadBalancer.Ingress; len(in) > 0 {
		a.LoadBalancerIP = in[0].IP
	}
	if *a == (nestv1.RequestedAddress{}) {
		return nil
	}
	return a
}

// etcdClientTLS is the TLS configuration of an etcd client of the tenant:
// its etcd CA and the API server's etcd client certificate, from the PKI
// Secret's data. etcd's serving certificate names 127.0.0.1, where the
// port forward listens.
func etcdClientTLS(pki map[string][]byte) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(pki[components.EtcdClientCert], pki[components.EtcdClientKey])
	if err != nil {
		return nil, fmt.Errorf("the PKI Secret's etcd client certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pki[components.EtcdCACert]) {
		return nil, fmt.Errorf("the PKI Secret has no etcd CA (%s)", components.EtcdCACert)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

// snapshotAMember streams etcd's snapshot into dst from the first Ready
// control-plane pod, by name, whose member answers, and returns the pod's
// name and the revision its member had just before.
func snapshotAMember(ctx context.Context, host client.Client, cfg *rest.Config, vc *nestv1.VirtualCluster, tlsConfig *tls.Config, dst *os.File) (string, int64, error) {
	n := controlplane.NamesOf(vc)
	var pods corev1.PodList
	if err := host.List(ctx, &pods, client.InNamespace(n.Namespace), client.MatchingLabels(n.Labels())); err != nil {
		return "", 0, fmt.Errorf("list the control-plane pods of %s: %w", vc.Name, err)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	var errs []error
	for _, pod := range pods.Items {
		if !podReady(&pod) {
			continue
		}
		revision, err := snapshotPod(ctx, cfg, pod, tlsConfig, dst)
		if err == nil {
			return pod.Name, revision, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", pod.Name, err))
		if err := dst.Truncate(0); err != nil {
			return "", 0, err
		}
		if _, err := dst.Seek(0, io.SeekStart); err != nil {
			return "", 0, err
		}
	}
	if len(errs) == 0 {
		return "", 0, fmt.Errorf("no control-plane pod of %s is Ready: its etcd cannot be read now", vc.Name)
	}
	return "", 0, fmt.Errorf("no etcd member of %s gave a snapshot: %w", vc.Name, errors.Join(errs...))
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// snapshotPod forwards a loopback port to pod's etcd client port and
// streams its member's snapshot into dst.
func snapshotPod(ctx context.Context, cfg *rest.Config, pod corev1.Pod, tlsConfig *tls.Config, dst io.Writer) (int64, error) {
	port, stop, err := forward(ctx, cfg, pod, components.EtcdClientPort)
	if err != nil {
		return 0, err
	}
	endpoint := fmt.Sprintf("https://127.0.0.1:%d", port)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConfig, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		stop()
		return 0, err
	}
	// The forward goes first: closed after the client, it would still be
	// copying etcd's last answers to a connection the client closed.
	defer cli.Close()
	defer stop()
	status, err := cli.Status(ctx, endpoint)
	if err != nil {
		return 0, fmt.Errorf("etcd status: %w", err)
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return 0, fmt.Errorf("etcd snapshot: %w", err)
	}
	defer rc.Close()
	if _, err := io.Copy(dst, rc); err != nil {
		return 0, fmt.Errorf("etcd snapshot stream: %w", err)
	}
	return status.Header.Revision, nil
}

// forward listens on a free loopback port forwarded to pod's port through
// the host API server, and returns the port and how to stop it. It gives
// up when ctx ends first.
func forward(ctx context.Context, cfg *rest.Config, pod corev1.Pod, podPort int) (int, func(), error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, nil, err
	}
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return 0, nil, err
	}
	url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, url)
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", podPort)}, stopCh, readyCh, io.Discard, io.Discard)
	if err != nil {
		return 0, nil, err
	}
	errCh := make(chan error, 1)
	go func() { errCh <- fw.ForwardPorts() }()
	select {
	case <-readyCh:
	case err := <-errCh:
		return 0, nil, fmt.Errorf("forward a port to %s/%s: %w", pod.Namespace, pod.Name, err)
	case <-ctx.Done():
		close(stopCh)
		return 0, nil, fmt.Errorf("forward a port to %s/%s: %w", pod.Namespace, pod.Name, ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		close(stopCh)
		return 0, nil, fmt.Errorf("forward a port to %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return int(ports[0].Local), func() { close(stopCh) }, nil
}
