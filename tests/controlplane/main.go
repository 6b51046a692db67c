// Command controlplane runs a real Kubernetes API server for mcpcache's test suite:
// an embedded etcd member followed by kube-apiserver, in one process.
//
// Usage:
//
//	controlplane -data-dir DIR -etcd-client-port N -etcd-peer-port N -- [kube-apiserver flags]
//
// Everything after "--" goes to kube-apiserver unchanged, except that --etcd-servers is
// added to point at the embedded member. The process exits when either part stops or
// when it receives SIGINT/SIGTERM.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for etcd data (required)")
	clientPort := flag.Int("etcd-client-port", 0, "loopback port for etcd clients (required)")
	peerPort := flag.Int("etcd-peer-port", 0, "loopback port for etcd peers (required)")
	flag.Parse()
	if *dataDir == "" || *clientPort == 0 || *peerPort == 0 {
		fmt.Fprintln(os.Stderr, "controlplane: -data-dir, -etcd-client-port and -etcd-peer-port are required")
		os.Exit(2)
	}

	etcd, clientURL, err := startEtcd(*dataDir, *clientPort, *peerPort)
	if err != nil {
		fmt.Fprintf(os.Stderr, "controlplane: etcd: %v\n", err)
		os.Exit(1)
	}
	defer etcd.Close()

	cmd := app.NewAPIServerCommand()
	cmd.SetArgs(append([]string{"--etcd-servers=" + clientURL}, flag.Args()...))

	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintf(os.Stderr, "controlplane: kube-apiserver: %v\n", err)
			os.Exit(1)
		}
	case err := <-etcd.Err():
		fmt.Fprintf(os.Stderr, "controlplane: etcd stopped: %v\n", err)
		os.Exit(1)
	}
}

// startEtcd starts a single-member etcd tuned for tests: no fsync (the data dir is
// thrown away), and frequent watch progress notifications so that the API server's
// watch cache stays current, as it does in a real cluster.
func startEtcd(dataDir string, clientPort, peerPort int) (*embed.Etcd, string, error) {
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dataDir, "etcd")
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true
	cfg.WatchProgressNotifyInterval = 5 * time.Second

	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-etcd.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		etcd.Close()
		return nil, "", fmt.Errorf("not ready after 60s")
	}
	return etcd, clientURL.String(), nil
}
