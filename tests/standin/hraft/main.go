// hraft-standin: one server of a real hashicorp/raft (v1.8.0) cluster that answers the parts
// of Consul's HTTP API kubectl-raft reads, for tests where Consul itself cannot run (its
// licence is not open source). Raft is the real library Consul uses, with Consul's timing
// at raft_multiplier=1; the state machine is a small key/value map.
//
//	hraft-standin -id hraft-0 -data /data -http :8500 -raft :8300 \
//	  -voters hraft-0=hraft-0.hraft.ns.svc.cluster.local:8300,... \
//	  -nonvoters hraft-3=hraft-3.hraft.ns.svc.cluster.local:8300,...
//
// With -https :8501 -tls-cert F -tls-key F -tls-ca F [-verify-incoming] (and -http "" to turn
// plain HTTP off, as Consul's `ports { http = -1 }`) the API is served over TLS (tls.go).
//
// Every server bootstraps with the same configuration (ErrCantBootstrap, once state exists,
// is ignored), so a restarted server keeps its log, term and vote from -data. Peers' HTTP
// APIs are reached on the host of their Raft address and this server's HTTP port.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

type config struct {
	id, httpAddr, raftAddr, advertise, dataDir string
	httpsAddr                                  string
	tls                                        tlsFiles
	voters, nonvoters                          []raft.Server
	dc, version                                string
	raftMultiplier                             int
	rpcHold, healthInterval, lastContact       time.Duration
	serfFailAfter                              time.Duration
	maxTrailingLogs                            uint64
}

type server struct {
	id        raft.ServerID
	advertise raft.ServerAddress
	// The scheme and port of every server's API (peers' are reached on the same).
	apiScheme string
	apiPort   string
	dc        string
	version   string
	rpcHold   time.Duration
	started   time.Time

	raft   *raft.Raft
	fsm    *kvFSM
	store  *boltStore
	trans  *raft.NetworkTransport
	pilot  *pilot
	client *http.Client
	log    hclog.Logger
	http   *http.Server // nil with -http ""
	https  *http.Server // nil without -https
	stop   chan struct{}
}

// parseServers reads "id1=host1:port,id2=host2:port".
func parseServers(s string, suffrage raft.ServerSuffrage) ([]raft.Server, error) {
	var out []raft.Server
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("%q is not ID=HOST:PORT", part)
		}
		out = append(out, raft.Server{Suffrage: suffrage, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
	}
	return out, nil
}

// The Raft transport's stream layer: TCP, advertising the name in the configuration (a pod's
// stable DNS name) rather than a resolved IP, so Leader() and the configuration agree.
type streamLayer struct {
	net.Listener
	advertise raftAddr
}

type raftAddr string

func (a raftAddr) Network() string { return "tcp" }
func (a raftAddr) String() string  { return string(a) }

func (l *streamLayer) Addr() net.Addr { return l.advertise }

func (l *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

func newServer(c config, log hclog.Logger) (*server, error) {
	apiScheme, apiAddr, client := "http", c.httpAddr, &http.Client{}
	var serverTLS *tls.Config
	if c.httpsAddr != "" {
		var err error
		if serverTLS, err = c.tls.serverConfig(); err != nil {
			return nil, fmt.Errorf("-https: %w", err)
		}
		clientTLS, err := c.tls.clientConfig()
		if err != nil {
			return nil, fmt.Errorf("-https: %w", err)
		}
		apiScheme, apiAddr = "https", c.httpsAddr
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS}}
	}
	_, apiPort, err := net.SplitHostPort(apiAddr)
	if err != nil {
		return nil, fmt.Errorf("-http/-https: %w", err)
	}
	initial := append(append([]raft.Server{}, c.voters...), c.nonvoters...)
	if c.advertise == "" {
		for _, srv := range initial {
			if string(srv.ID) == c.id {
				c.advertise = string(srv.Address)
			}
		}
	}
	if c.advertise == "" {
		return nil, errors.New("-advertise is needed when -id is not in -voters or -nonvoters")
	}
	if err := os.MkdirAll(c.dataDir, 0o755); err != nil {
		return nil, err
	}
	s := &server{
		id: raft.ServerID(c.id), advertise: raft.ServerAddress(c.advertise), apiScheme: apiScheme, apiPort: apiPort,
		dc: c.dc, version: c.version, rpcHold: c.rpcHold, started: time.Now(),
		fsm: newFSM(), client: client, log: log, stop: make(chan struct{}),
	}
	s.pilot = &pilot{s: s, interval: c.healthInterval, threshold: c.lastContact,
		maxTrailing: c.maxTrailingLogs, serfFailAfter: c.serfFailAfter}

	if s.store, err = openBoltStore(filepath.Join(c.dataDir, "raft.db")); err != nil {
		return nil, err
	}
	logs, err := raft.NewLogCache(512, s.store)
	if err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(c.dataDir, 2, log.Named("server.raft.snapshot"))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", c.raftAddr)
	if err != nil {
		return nil, err
	}
	s.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  &streamLayer{Listener: ln, advertise: raftAddr(c.advertise)},
		MaxPool: 3, Timeout: 10 * time.Second, Logger: log.Named("server.raft.net"),
	})

	// Consul's Raft settings (agent/consul/config.go) at performance.raft_multiplier.
	rc := raft.DefaultConfig()
	rc.LocalID = s.id
	m := time.Duration(c.raftMultiplier)
	rc.HeartbeatTimeout = m * 1000 * time.Millisecond
	rc.ElectionTimeout = m * 1000 * time.Millisecond
	rc.LeaderLeaseTimeout = m * 500 * time.Millisecond
	rc.SnapshotThreshold = 16384
	rc.SnapshotInterval = 30 * time.Second
	rc.TrailingLogs = 10240
	rc.ShutdownOnRemove = false
	rc.Logger = log.Named("server.raft")

	// The package-level BootstrapCluster, before NewRaft: the Raft.BootstrapCluster method
	// refuses a non-voter (ErrNotVoter), and every server, non-voters too, writes the same
	// first entry.
	if len(initial) > 0 {
		err := raft.BootstrapCluster(rc, logs, s.store, snaps, s.trans, raft.Configuration{Servers: initial})
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
	}
	if s.raft, err = raft.NewRaft(rc, s.fsm, logs, s.store, snaps, s.trans); err != nil {
		return nil, err
	}
	go s.pilot.run(s.stop)
	if c.httpAddr != "" {
		s.http = &http.Server{Addr: c.httpAddr, Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	}
	if c.httpsAddr != "" {
		s.https = &http.Server{Addr: c.httpsAddr, Handler: s.routes(), TLSConfig: serverTLS,
			ReadHeaderTimeout: 10 * time.Second}
	}
	return s, nil
}

// shutdown stops Raft cleanly without handing leadership over: a Consul server does not leave
// on SIGTERM by default (leave_on_terminate is false for servers).
func (s *server) shutdown() {
	close(s.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, h := range []*http.Server{s.http, s.https} {
		if h != nil {
			h.Shutdown(ctx)
		}
	}
	if err := s.raft.Shutdown().Error(); err != nil {
		s.log.Warn("error shutting down raft", "error", err)
	}
	s.trans.Close()
	s.store.Close()
}

func main() {
	host, _ := os.Hostname()
	var c config
	var voters, nonvoters string
	flag.StringVar(&c.id, "id", host, "Raft server ID and node name (default: the hostname, i.e. the pod name)")
	flag.StringVar(&c.httpAddr, "http", ":8500", "HTTP API listen address, \"\" for none; peers' APIs are on this port too (without -https)")
	flag.StringVar(&c.httpsAddr, "https", "", "HTTPS API listen address (Consul's ports.https); peers' APIs are reached over HTTPS on this port")
	flag.StringVar(&c.tls.cert, "tls-cert", "", "the server's certificate (PEM), also its client certificate to peers")
	flag.StringVar(&c.tls.key, "tls-key", "", "the server's key (PEM)")
	flag.StringVar(&c.tls.ca, "tls-ca", "", "the CA (PEM) that signed the servers' and clients' certificates")
	flag.BoolVar(&c.tls.verifyIncoming, "verify-incoming", false, "require and verify client certificates on HTTPS (Consul's tls.https.verify_incoming)")
	probeURL := flag.String("probe", "", "be a client: GET this URL with the TLS files and exit 0 on 200 (a readiness probe)")
	probeName := flag.String("probe-server-name", "", "with -probe: the name the server's certificate must carry")
	flag.StringVar(&c.raftAddr, "raft", ":8300", "Raft listen address")
	flag.StringVar(&c.advertise, "advertise", "", "Raft address peers reach this server at (default: this ID's entry in -voters/-nonvoters)")
	flag.StringVar(&c.dataDir, "data", "/data", "directory for the Raft log, stable store and snapshots")
	flag.StringVar(&voters, "voters", "", "initial voters: ID=HOST:PORT,...")
	flag.StringVar(&nonvoters, "nonvoters", "", "initial non-voters: ID=HOST:PORT,...")
	flag.StringVar(&c.dc, "datacenter", "dc1", "datacenter name reported")
	flag.StringVar(&c.version, "version", "1.21.0-standin", "Consul version reported")
	flag.IntVar(&c.raftMultiplier, "raft-multiplier", 1, "Consul's performance.raft_multiplier (heartbeat and election 1s, lease 500ms, times this)")
	flag.DurationVar(&c.rpcHold, "rpc-hold-timeout", 7*time.Second, "how long a follower waits for a leader before answering \"No cluster leader\" (Consul: rpc_hold_timeout)")
	flag.DurationVar(&c.healthInterval, "server-health-interval", 250*time.Millisecond, "how often the leader gathers server stats (Consul: 2s)")
	flag.DurationVar(&c.lastContact, "last-contact-threshold", 200*time.Millisecond, "autopilot LastContactThreshold")
	flag.Uint64Var(&c.maxTrailingLogs, "max-trailing-logs", 250, "autopilot MaxTrailingLogs")
	flag.DurationVar(&c.serfFailAfter, "serf-fail-after", 2*time.Second, "silence after which SerfStatus reads \"failed\" (stands in for Serf's failure detector)")
	flag.Parse()
	if *probeURL != "" {
		if err := probe(c.tls, *probeURL, *probeName); err != nil {
			fmt.Fprintln(os.Stderr, "probe:", err)
			os.Exit(1)
		}
		return
	}

	log := hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Info, Output: os.Stderr})
	var err error
	if c.voters, err = parseServers(voters, raft.Voter); err == nil {
		c.nonvoters, err = parseServers(nonvoters, raft.Nonvoter)
	}
	if err != nil {
		log.Error("bad flags", "error", err)
		os.Exit(2)
	}
	s, err := newServer(c, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		os.Exit(1)
	}
	for _, h := range []*http.Server{s.http, s.https} {
		if h == nil {
			continue
		}
		ln, err := net.Listen("tcp", h.Addr)
		if err != nil {
			log.Error("cannot listen", "error", err)
			os.Exit(1)
		}
		go func(h *http.Server) {
			var err error
			if h.TLSConfig != nil {
				err = h.ServeTLS(ln, "", "")
			} else {
				err = h.Serve(ln)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server", "error", err)
				os.Exit(1)
			}
		}(h)
	}
	log.Info("consul stand-in started", "id", c.id, "advertise", s.advertise, "http", c.httpAddr, "https", c.httpsAddr, "version", c.version)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	got := <-sig
	log.Info("caught signal, shutting down", "signal", got.String())
	s.shutdown()
	log.Info("shutdown complete")
}
