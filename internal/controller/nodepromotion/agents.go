package nodepromotion

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/pki"
)

// DefaultAgentCASecret names the agent CA Secret in nest-manager's namespace.
const DefaultAgentCASecret = "nest-agent-ca"

// AgentCASecret is the agent CA Secret for ca (the CA's certificate and key),
// in namespace.
func AgentCASecret(namespace string, ca pki.KeyPair) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultAgentCASecret, Namespace: namespace},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{AgentCACertKey: ca.CertPEM, AgentCAKeyKey: ca.KeyPEM},
	}
}

// Keys of the agent CA Secret (a kubernetes.io/tls Secret).
const (
	AgentCACertKey = corev1.TLSCertKey
	AgentCAKeyKey  = corev1.TLSPrivateKeyKey
)

// SecretAgents reaches agents with a client certificate for
// agent.ManagerIdentity that it issues itself from the agent CA in a host
// Secret. The certificate lives in memory only and is issued again a day
// before it expires.
type SecretAgents struct {
	Client client.Reader
	// Secret names the agent CA Secret.
	Secret client.ObjectKey
	// Port is the agents' port; zero means agent.DefaultPort.
	Port int

	mu      sync.Mutex
	caPEM   []byte
	cert    tls.Certificate
	expires time.Time
}

// For implements Agents: a client of the agent at gn's nodeIP that expects
// a certificate naming gn.
func (s *SecretAgents) For(ctx context.Context, gn *nestv1.GlobalNode) (Agent, error) {
	caPEM, cert, err := s.credentials(ctx)
	if err != nil {
		return nil, err
	}
	return agent.NewClient(gn.Name, gn.Spec.NodeIP, s.Port, caPEM, cert)
}

func (s *SecretAgents) credentials(ctx context.Context) ([]byte, tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.caPEM != nil && time.Until(s.expires) > 24*time.Hour {
		return s.caPEM, s.cert, nil
	}
	secret := &corev1.Secret{}
	if err := s.Client.Get(ctx, s.Secret, secret); err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("the agent CA Secret %s (--agent-ca-secret): %w", s.Secret, err)
	}
	ca, err := pki.LoadCA(pki.KeyPair{CertPEM: secret.Data[AgentCACertKey], KeyPEM: secret.Data[AgentCAKeyKey]})
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("the agent CA Secret %s: %w", s.Secret, err)
	}
	pair, err := ca.Issue(agent.ClientCertSpec(agent.ManagerIdentity, agent.ManagerCertValidity))
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	s.caPEM, s.cert, s.expires = ca.CertPEM, cert, time.Now().Add(agent.ManagerCertValidity)
	return s.caPEM, s.cert, nil
}
