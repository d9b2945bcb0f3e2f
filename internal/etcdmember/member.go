// Package etcdmember keeps one member of a tenant's etcd cluster in its
// cluster. It runs as the etcd-member helper, a sidecar started before etcd
// in every control-plane pod (`nest-syncer etcd-member`), and does what
// kubeadm's `join` does for a stacked etcd, at every start of the pod:
//
//   - Join decides how the member's etcd starts and writes it to a file of
//     ETCD_INITIAL_CLUSTER, ETCD_INITIAL_CLUSTER_STATE and (for a new
//     cluster) ETCD_INITIAL_CLUSTER_TOKEN lines: with data, as it was;
//     without data, as a learner added to the cluster its peers run
//     (replacing a started member of its own peer URL, whose data is lost);
//     or, only when nest-manager names it the bootstrap member (a tenant of
//     one replica, or one never Ready yet) and no peer answers, as a new
//     cluster of one.
//   - Maintain then promotes the learner once it has caught up with the
//     leader (etcd refuses to promote a learner that has not), and keeps the
//     member's advertised peer URL the one it should be (a member made
//     before the tenant had peers advertised loopback).
//
// Every step reads the cluster's state afresh, so the helper can be killed
// between any two and started again.
package etcdmember

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/atomicfile"
)

// Config is one member and where its peers are.
type Config struct {
	// Name is the member's name (--name): the pod's name.
	Name string
	// PeerURL is the URL its peers reach it at (--initial-advertise-peer-urls).
	PeerURL string
	// LocalClientURL is where the helper reaches its own member: loopback.
	LocalClientURL string
	// PeerClientURLs are the client URLs of the other members the cluster
	// may have, asked for the membership.
	PeerClientURLs []string
	// DataDir is the member's --data-dir; a member with data restarts as it was.
	DataDir string
	// InitialClusterFile receives the ETCD_INITIAL_CLUSTER and
	// ETCD_INITIAL_CLUSTER_STATE lines.
	InitialClusterFile string
	// Bootstrap says whether this member may start a new cluster of one when
	// it has no data and no peer answers. It is asked at every try, as
	// nest-manager may withdraw it: once a tenant of several replicas was
	// Ready, a member without data always joins, so a lost volume never
	// splits a new, empty cluster from the tenant's.
	Bootstrap func() bool
	// Restore says whether this member, when it has no data, is to start
	// from the snapshot nest restore sends (Receive) instead: it waits for
	// it, and never starts an empty cluster. Asked at every try.
	Restore func() bool
	// TLS is the client identity the helper talks to etcd with: CA, certificate, key files.
	CAFile, CertFile, KeyFile string
}

// dialTimeout bounds one connection attempt to a member.
const dialTimeout = 3 * time.Second

// retryPeriod is how often Join and Maintain try again.
const retryPeriod = 2 * time.Second

// HasData reports whether dir holds a member's data: a write-ahead log, as
// etcd itself decides (wal.Exist). etcd makes its member/ directory before
// a join succeeds, so a member/ without a log is the remains of a failed
// join, not data.
func HasData(dir string) (bool, error) {
	logs, err := filepath.Glob(filepath.Join(dir, "member", "wal", "*.wal"))
	return len(logs) > 0, err
}

// Join writes c.InitialClusterFile, adding the member to its peers'
// cluster as a learner when it has no data, and retries every 2 s until it
// can or ctx ends.
func Join(ctx context.Context, c Config) error {
	log := klog.FromContext(ctx)
	var lines string
	err := wait.PollUntilContextCancel(ctx, retryPeriod, true, func(ctx context.Context) (bool, error) {
		l, err := joinOnce(ctx, c)
		if err != nil {
			log.Info("Cannot join the etcd cluster yet", "member", c.Name, "err", err)
			return false, nil
		}
		lines = l
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("join the etcd cluster as %s: %w", c.Name, err)
	}
	return atomicfile.Write(c.InitialClusterFile, []byte(lines), 0o644)
}

// joinOnce decides the initial cluster, adding the member to the cluster
// when it must.
func joinOnce(ctx context.Context, c Config) (string, error) {
	hasData, err := HasData(c.DataDir)
	if err != nil {
		return "", err
	}
	if hasData {
		// etcd ignores the initial cluster when it has data. A snapshot
		// left from a restore killed after its rename is done with.
		if err := errors.Join(os.RemoveAll(filepath.Join(c.DataDir, restoreFile)), removeParts(c.DataDir)); err != nil {
			return "", err
		}
		return initialCluster("existing", "", []string{c.Name + "=" + c.PeerURL}), nil
	}
	// What a failed join left is not data: etcd would take it for its own.
	if err := os.RemoveAll(filepath.Join(c.DataDir, "member")); err != nil {
		return "", err
	}
	if c.Restore != nil && c.Restore() {
		if err := restore(c); err != nil {
			return "", err
		}
		return initialCluster("existing", "", []string{c.Name + "=" + c.PeerURL}), nil
	}
	members, err := c.peerMembers(ctx)
	if err != nil {
		if c.Bootstrap != nil && c.Bootstrap() {
			token, err := newClusterToken()
			if err != nil {
				return "", err
			}
			return initialCluster("new", token, []string{c.Name + "=" + c.PeerURL}), nil
		}
		return "", err
	}
	if m := loopbackMember(members); m != nil && !isLoopback(HostOf(c.PeerURL)) {
		// A member made before the tenant had peers, not yet at its peer
		// URL (its helper sets it): a join now would name an address etcd
		// later refuses. (Members that all live on loopback, as in tests,
		// are left alone.)
		return "", fmt.Errorf("member %s still advertises %v; waiting for its helper to move it", m.Name, m.PeerURLs)
	}
	members, err = c.addSelf(ctx, members)
	if err != nil {
		return "", err
	}
	return initialCluster("existing", "", clusterOf(members, c.PeerURL, c.Name)), nil
}

// loopbackMember is a started member whose peer URL is on loopback, or nil.
func loopbackMember(members []*etcdserverpb.Member) *etcdserverpb.Member {
	for _, m := range members {
		for _, u := range m.PeerURLs {
			if m.Name != "" && isLoopback(HostOf(u)) {
				return m
			}
		}
	}
	return nil
}

func isLoopback(host string) bool { return host == "localhost" || net.ParseIP(host).IsLoopback() }

// newClusterToken is a new cluster's --initial-cluster-token: random, so
// two clusters started from the same peer URLs never share their IDs.
func newClusterToken() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "nest-" + hex.EncodeToString(b), nil
}

// peerMembers lists the cluster's members through the peers' client URLs.
func (c Config) peerMembers(ctx context.Context) ([]*etcdserverpb.Member, error) {
	if len(c.PeerClientURLs) == 0 {
		return nil, errors.New("no peers")
	}
	return c.memberList(ctx, c.PeerClientURLs)
}

// memberList lists the cluster's members through endpoints.
func (c Config) memberList(ctx context.Context, endpoints []string) ([]*etcdserverpb.Member, error) {
	cli, err := c.client(endpoints)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*dialTimeout)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the members at %s: %w", strings.Join(endpoints, ","), err)
	}
	return resp.Members, nil
}

// addSelf adds the member as a learner unless the cluster holds it, not
// yet started, from an earlier try; a started member of its peer URL lost
// its data, so it is removed first. It returns the members after.
func (c Config) addSelf(ctx context.Context, members []*etcdserverpb.Member) ([]*etcdserverpb.Member, error) {
	cli, err := c.client(c.PeerClientURLs)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*dialTimeout)
	defer cancel()
	if m := memberOf(members, c.PeerURL); m != nil {
		if m.Name == "" {
			return members, nil
		}
		if _, err := cli.MemberRemove(ctx, m.ID); err != nil {
			return nil, fmt.Errorf("remove member %s (%x), which lost its data: %w", m.Name, m.ID, err)
		}
		klog.FromContext(ctx).Info("Removed the member that lost its data, to add it again", "member", m.Name, "id", fmt.Sprintf("%x", m.ID))
	}
	resp, err := cli.MemberAddAsLearner(ctx, []string{c.PeerURL})
	if err != nil {
		return nil, fmt.Errorf("add %s as a learner: %w", c.PeerURL, err)
	}
	klog.FromContext(ctx).Info("Added the member as a learner", "member", c.Name, "id", fmt.Sprintf("%x", resp.Member.ID))
	return resp.Members, nil
}

// memberOf is the member with peerURL, or nil.
func memberOf(members []*etcdserverpb.Member, peerURL string) *etcdserverpb.Member {
	for _, m := range members {
		if slices.Contains(m.PeerURLs, peerURL) {
			return m
		}
	}
	return nil
}

// clusterOf is the initial cluster as `etcdctl member add` prints it: every
// member's name=peerURL, the joining one (peerURL) under name, others not
// started yet under no name.
func clusterOf(members []*etcdserverpb.Member, peerURL, name string) []string {
	var out []string
	for _, m := range members {
		n := m.Name
		if slices.Contains(m.PeerURLs, peerURL) {
			n = name
		}
		for _, u := range m.PeerURLs {
			out = append(out, n+"="+u)
		}
	}
	slices.Sort(out)
	return out
}

// initialCluster renders the initial cluster file; token is "" but for a
// new cluster.
func initialCluster(state, token string, cluster []string) string {
	out := "ETCD_INITIAL_CLUSTER=" + strings.Join(cluster, ",") + "\nETCD_INITIAL_CLUSTER_STATE=" + state + "\n"
	if token != "" {
		out += "ETCD_INITIAL_CLUSTER_TOKEN=" + token + "\n"
	}
	return out
}

// Maintain promotes the member once it is a learner that caught up and
// sets its advertised peer URL to c.PeerURL, checking every 2 s until both
// hold and then every 30 s, until ctx ends.
func Maintain(ctx context.Context, c Config) {
	log := klog.FromContext(ctx)
	period := retryPeriod
	var failingSince time.Time
	for {
		done, err := maintainOnce(ctx, c)
		if err == nil {
			failingSince = time.Time{}
		} else if failingSince.IsZero() {
			failingSince = time.Now()
		}
		switch {
		case err != nil:
			log.Info("etcd member not settled yet", "member", c.Name, "err", err)
			// Long enough that etcd is not merely starting: it is stuck
			// on a join the cluster no longer matches.
			if time.Since(failingSince) > rejoinAfter {
				c.rejoinWithoutData(ctx)
				failingSince = time.Now()
			}
		case done && period == retryPeriod:
			log.Info("etcd member is a voting member at its peer URL", "member", c.Name, "peerURL", c.PeerURL)
			period = 30 * time.Second
		}
		if !done {
			period = retryPeriod
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
}

// rejoinAfter is how long the local member may fail to answer before the
// helper, when the member still has no data, writes its initial cluster
// again.
const rejoinAfter = time.Minute

// rejoinWithoutData writes the initial cluster file again while the member
// has no data: etcd, restarting after a failed join, then starts from the
// cluster as it is now, not as it was when the pod started.
func (c Config) rejoinWithoutData(ctx context.Context) {
	if has, err := HasData(c.DataDir); err != nil || has {
		return
	}
	lines, err := joinOnce(ctx, c)
	if err != nil {
		return
	}
	if err := atomicfile.Write(c.InitialClusterFile, []byte(lines), 0o644); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot write the initial cluster again", "member", c.Name)
	}
}

// maintainOnce does one step of Maintain and reports whether the member is
// settled.
func maintainOnce(ctx context.Context, c Config) (bool, error) {
	local, err := c.client([]string{c.LocalClientURL})
	if err != nil {
		return false, err
	}
	defer local.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*dialTimeout)
	defer cancel()
	status, err := local.Status(ctx, c.LocalClientURL)
	if err != nil {
		return false, fmt.Errorf("status of the local member: %w", err)
	}
	id := status.Header.MemberId
	// A learner refuses membership calls: ask its peers.
	endpoints := append([]string{c.LocalClientURL}, c.PeerClientURLs...)
	if status.IsLearner {
		endpoints = c.PeerClientURLs
	}
	all, err := c.client(endpoints)
	if err != nil {
		return false, err
	}
	defer all.Close()
	if status.IsLearner {
		if _, err := all.MemberPromote(ctx, id); err != nil {
			return false, fmt.Errorf("promote learner %x: %w", id, err)
		}
		klog.FromContext(ctx).Info("Promoted the learner to a voting member", "member", c.Name, "id", fmt.Sprintf("%x", id))
	}
	list, err := all.MemberList(ctx)
	if err != nil {
		return false, fmt.Errorf("list members: %w", err)
	}
	for _, m := range list.Members {
		if m.ID == id && !slices.Equal(m.PeerURLs, []string{c.PeerURL}) {
			if _, err := all.MemberUpdate(ctx, id, []string{c.PeerURL}); err != nil {
				return false, fmt.Errorf("set the peer URL of %x to %s: %w", id, c.PeerURL, err)
			}
			klog.FromContext(ctx).Info("Set the member's peer URL", "member", c.Name, "from", m.PeerURLs, "to", c.PeerURL)
		}
	}
	return true, nil
}

// Members lists the cluster's members as the local member sees them.
func Members(ctx context.Context, c Config) ([]*etcdserverpb.Member, error) {
	return c.memberList(ctx, []string{c.LocalClientURL})
}

// client is an etcd client of endpoints with the helper's TLS identity.
func (c Config) client(endpoints []string) (*clientv3.Client, error) {
	var tlsConfig *tls.Config
	if c.CertFile != "" {
		info := transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.CAFile}
		var err error
		if tlsConfig, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
	}
	return clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: dialTimeout, TLS: tlsConfig,
		// The helper logs what matters itself; the client's own logs are noise.
		Logger: zap.NewNop(),
	})
}

// HostOf is the host of a URL such as https://name:2379.
func HostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
