package main

// The Consul HTTP API shapes the stand-in serves. Field names, types and status codes follow
// Consul's agent/operator_endpoint.go, agent/agent_endpoint.go, agent/status_endpoint.go,
// agent/kvs_endpoint.go, agent/http.go and api/*.go; what it cannot model is said where it
// is done.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// hopHeader counts forwards, so a request chasing a moving leader stops after two hops.
const hopHeader = "X-Hraft-Forwarded"

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(path string, methods []string, h http.HandlerFunc) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			for _, m := range methods {
				if r.Method == m {
					h(w, r)
					return
				}
			}
			// Consul's MethodNotAllowedError.
			w.Header().Set("Allow", strings.Join(append([]string{"OPTIONS"}, methods...), ","))
			httpError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed", r.Method))
		})
	}
	handle("/v1/status/leader", []string{"GET"}, s.statusLeader)
	handle("/v1/status/peers", []string{"GET"}, s.statusPeers)
	handle("/v1/agent/self", []string{"GET"}, s.agentSelf)
	handle("/v1/operator/raft/configuration", []string{"GET"}, s.raftConfiguration)
	handle("/v1/operator/raft/transfer-leader", []string{"POST"}, s.transferLeader)
	handle("/v1/operator/raft/peer", []string{"DELETE"}, s.removePeer)
	handle("/v1/operator/autopilot/health", []string{"GET"}, s.autopilotHealth)
	handle("/v1/kv/", []string{"GET", "PUT", "DELETE"}, s.kv)
	// Not Consul: a test's way to grow the cluster (Consul adds servers through Serf).
	handle("/v1/operator/raft/add-nonvoter", []string{"POST", "PUT"}, s.addNonvoter)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpError(w, http.StatusNotFound, "Invalid URL path: not a recognized HTTP API endpoint\n")
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v interface{}) {
	body, err := json.Marshal(v)
	if err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(body)
}

// httpError is how Consul's HTTP layer reports an error: the status and the bare text.
func httpError(w http.ResponseWriter, code int, text string) {
	w.WriteHeader(code)
	io.WriteString(w, text)
}

// GET /v1/status/leader: the leader's Raft address as a JSON string, "" when none is known.
// Answered locally, as Consul's Status.Leader is.
func (s *server) statusLeader(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, string(s.raft.Leader()))
}

// GET /v1/status/peers: the address of every server in the Raft configuration, voters and
// non-voters alike (Consul's Status.Peers lists configuration.Servers unfiltered).
func (s *server) statusPeers(w http.ResponseWriter, r *http.Request) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	var peers []string
	for _, srv := range f.Configuration().Servers {
		peers = append(peers, string(srv.Address))
	}
	writeJSON(w, http.StatusOK, peers)
}

// GET /v1/agent/self: Consul's agent.Self, with the fields a server has. Stats.raft is
// hashicorp/raft's Stats() map as it is (Consul passes it through).
func (s *server) agentSelf(w http.ResponseWriter, r *http.Request) {
	leaderAddr, _ := s.raft.LeaderWithID()
	isLeader := s.raft.State() == raft.Leader
	memberIP := ""
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		memberIP, _, _ = net.SplitHostPort(a.String())
	}
	_, raftPort, _ := net.SplitHostPort(string(s.advertise))
	writeJSON(w, http.StatusOK, map[string]interface{}{
		"Config": map[string]interface{}{
			"Datacenter":        s.dc,
			"PrimaryDatacenter": s.dc,
			"NodeName":          string(s.id),
			"NodeID":            string(s.id), // the Raft server ID (Raft protocol 3)
			"Revision":          "standin",
			"Server":            true,
			"Version":           s.version,
			"BuildDate":         s.started.UTC().Format(time.RFC3339),
		},
		"DebugConfig": map[string]interface{}{
			"Datacenter":   s.dc,
			"NodeName":     string(s.id),
			"NodeID":       string(s.id),
			"ServerMode":   true,
			"RaftProtocol": 3,
			"Bootstrap":    false,
		},
		"Coord": map[string]interface{}{
			"Vec": []float64{0, 0, 0, 0, 0, 0, 0, 0}, "Error": 1.5, "Adjustment": 0, "Height": 1e-05,
		},
		// serf.Member: Status 1 is StatusAlive.
		"Member": map[string]interface{}{
			"Name": string(s.id), "Addr": memberIP, "Port": 8301,
			"Tags": map[string]string{
				"role": "consul", "dc": s.dc, "id": string(s.id), "port": raftPort,
				"raft_vsn": "3", "vsn": "2", "vsn_min": "2", "vsn_max": "3",
				"build": s.version + ":standin", "segment": "",
			},
			"Status": 1, "ProtocolMin": 1, "ProtocolMax": 5, "ProtocolCur": 2,
			"DelegateMin": 2, "DelegateMax": 5, "DelegateCur": 4,
		},
		"Stats": map[string]map[string]string{
			"agent": {"check_monitors": "0", "check_ttls": "0", "checks": "0", "services": "0"},
			"build": {"prerelease": "", "revision": "standin", "version": s.version, "version_metadata": ""},
			"consul": {
				"acl": "disabled", "bootstrap": "false", "known_datacenters": "1", "server": "true",
				"leader": strconv.FormatBool(isLeader), "leader_addr": string(leaderAddr),
			},
			"raft": s.raft.Stats(),
			"runtime": {
				"arch": runtime.GOARCH, "os": runtime.GOOS, "version": runtime.Version(),
				"cpu_count": strconv.Itoa(runtime.NumCPU()), "max_procs": strconv.Itoa(runtime.GOMAXPROCS(0)),
				"goroutines": strconv.Itoa(runtime.NumGoroutine()),
			},
		},
		"Meta": map[string]string{"consul-network-segment": ""},
	})
}

// raftServer is Consul's api.RaftServer.
type raftServer struct {
	ID              string
	Node            string
	Address         string
	Leader          bool
	ProtocolVersion string
	Voter           bool
	LastIndex       uint64
}

// GET /v1/operator/raft/configuration[?stale]: forwarded to the leader unless ?stale.
// LastIndex comes from the leader's autopilot view (0 where it has none, as in Consul).
func (s *server) raftConfiguration(w http.ResponseWriter, r *http.Request) {
	if _, stale := r.URL.Query()["stale"]; !stale && s.forwarded(w, r) {
		return
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	leader := s.raft.Leader()
	out := struct {
		Servers []raftServer
		Index   uint64
	}{Index: f.Index()}
	for _, srv := range f.Configuration().Servers {
		out.Servers = append(out.Servers, raftServer{
			ID:              string(srv.ID),
			Node:            string(srv.ID), // the node name is the ID here
			Address:         string(srv.Address),
			Leader:          srv.Address == leader,
			ProtocolVersion: "3",
			Voter:           srv.Suffrage == raft.Voter,
			LastIndex:       s.pilot.lastIndex(srv.ID),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// GET /v1/operator/autopilot/health: the leader's view; 429 with the same body when the
// cluster is unhealthy, as Consul answers.
func (s *server) autopilotHealth(w http.ResponseWriter, r *http.Request) {
	if s.forwarded(w, r) {
		return
	}
	reply := s.pilot.health()
	if reply == nil {
		// A new leader before its first round: Consul returns the empty reply.
		reply = &healthReply{}
	}
	code := http.StatusOK
	if !reply.Healthy {
		code = http.StatusTooManyRequests
	}
	writeJSON(w, code, reply)
}

// POST /v1/operator/raft/transfer-leader[?id=ID]: synchronous, on the leader. Consul runs it
// as a gRPC call whose error reaches the HTTP layer unconverted, so a failure is a 500 with
// gRPC's "rpc error: code = Unknown desc = ..." text (its 404 "Failed to transfer Leader"
// branch only runs when the call succeeds without Success, which the server never returns).
func (s *server) transferLeader(w http.ResponseWriter, r *http.Request) {
	if s.forwarded(w, r) {
		return
	}
	fail := func(err error) {
		httpError(w, http.StatusInternalServerError, "rpc error: code = Unknown desc = "+err.Error())
	}
	var f raft.Future
	if id := r.URL.Query().Get("id"); id != "" {
		addr, ok := s.addressOf(raft.ServerID(id))
		if !ok {
			fail(fmt.Errorf("Could not find address for server id %v", id))
			return
		}
		f = s.raft.LeadershipTransferToServer(raft.ServerID(id), addr)
	} else {
		f = s.raft.LeadershipTransfer()
	}
	if err := f.Error(); err != nil {
		s.log.Warn("leadership transfer failed", "id", r.URL.Query().Get("id"), "error", err)
		fail(err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"Success": true})
}

// DELETE /v1/operator/raft/peer?id=ID|?address=HOST:PORT, on the leader; 200 and no body.
func (s *server) removePeer(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	_, hasID := q["id"]
	_, hasAddr := q["address"]
	if !hasID && !hasAddr {
		httpError(w, http.StatusBadRequest, "Must specify either ?id with the server's ID or ?address with IP:port of peer to remove")
		return
	}
	if hasID && hasAddr {
		httpError(w, http.StatusBadRequest, "Must specify only one of ?id or ?address")
		return
	}
	if s.forwarded(w, r) {
		return
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	var id raft.ServerID
	for _, srv := range f.Configuration().Servers {
		if (hasID && string(srv.ID) == q.Get("id")) || (hasAddr && string(srv.Address) == q.Get("address")) {
			id = srv.ID
		}
	}
	switch {
	case id == "" && hasID:
		httpError(w, http.StatusInternalServerError, fmt.Sprintf("id %q was not found in the Raft configuration", q.Get("id")))
		return
	case id == "":
		httpError(w, http.StatusInternalServerError, fmt.Sprintf("address %q was not found in the Raft configuration", q.Get("address")))
		return
	}
	if err := s.raft.RemoveServer(id, 0, 0).Error(); err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.log.Warn("Removed Raft peer with id", "peer_id", id)
	w.WriteHeader(http.StatusOK)
}

// POST /v1/operator/raft/add-nonvoter?id=ID&address=HOST:PORT (stand-in only), on the leader.
func (s *server) addNonvoter(w http.ResponseWriter, r *http.Request) {
	id, addr := r.URL.Query().Get("id"), r.URL.Query().Get("address")
	if id == "" || addr == "" {
		httpError(w, http.StatusBadRequest, "Must specify ?id and ?address")
		return
	}
	if s.forwarded(w, r) {
		return
	}
	if err := s.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 0).Error(); err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, true)
}

// /v1/kv/KEY: GET (forwarded unless ?stale; ?raw for the bare value; 404 without a body
// when missing), PUT (the body is the value; `true`), DELETE (`true`). Writes go through
// Raft on the leader.
func (s *server) kv(w http.ResponseWriter, r *http.Request) {
	k := strings.TrimPrefix(r.URL.Path, "/v1/kv/")
	if k == "" && r.Method != "GET" {
		httpError(w, http.StatusBadRequest, "Missing key name")
		return
	}
	q := r.URL.Query()
	if _, stale := q["stale"]; !(r.Method == "GET" && stale) && s.forwarded(w, r) {
		return
	}
	if r.Method == "GET" {
		w.Header().Set("X-Consul-Index", strconv.FormatUint(max(s.raft.AppliedIndex(), 1), 10))
		w.Header().Set("X-Consul-KnownLeader", strconv.FormatBool(s.raft.Leader() != ""))
		e, ok := s.fsm.get(k)
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if _, raw := q["raw"]; raw {
			w.Write(e.Value)
			return
		}
		// api.KVPair; []byte encodes as base64, nil as null, as Consul's does.
		writeJSON(w, http.StatusOK, []map[string]interface{}{{
			"LockIndex": 0, "Key": k, "Flags": 0, "Value": e.Value,
			"CreateIndex": e.CreateIndex, "ModifyIndex": e.ModifyIndex,
		}})
		return
	}
	c := kvCommand{Op: "delete", Key: k}
	if r.Method == "PUT" {
		body, err := io.ReadAll(io.LimitReader(r.Body, 512*1024+1))
		if err != nil {
			httpError(w, http.StatusBadRequest, err.Error())
			return
		}
		if len(body) > 512*1024 {
			httpError(w, http.StatusRequestEntityTooLarge, "Request body too large")
			return
		}
		c = kvCommand{Op: "set", Key: k, Value: body}
	}
	data, _ := json.Marshal(c)
	f := s.raft.Apply(data, 10*time.Second)
	if err := f.Error(); err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if err, ok := f.Response().(error); ok {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, true)
}

func (s *server) addressOf(id raft.ServerID) (raft.ServerAddress, bool) {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return "", false
	}
	for _, srv := range f.Configuration().Servers {
		if srv.ID == id {
			return srv.Address, true
		}
	}
	return "", false
}

// forwarded sends a leader-only request on to the leader and copies its answer back,
// returning true; on the leader it returns false and the caller answers. Like Consul's RPC
// forwarding it waits up to the RPC hold timeout for a leader to be known, then answers 500
// "No cluster leader" (structs.ErrNoLeader).
func (s *server) forwarded(w http.ResponseWriter, r *http.Request) bool {
	if s.raft.State() == raft.Leader {
		return false
	}
	hops, _ := strconv.Atoi(r.Header.Get(hopHeader))
	leader := s.waitForLeader(r.Context())
	if leader == "" || hops >= 2 {
		httpError(w, http.StatusInternalServerError, "No cluster leader")
		return true
	}
	host, _, err := net.SplitHostPort(string(leader))
	if err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return true
	}
	body, _ := io.ReadAll(r.Body)
	url := s.apiScheme + "://" + net.JoinHostPort(host, s.apiPort) + r.URL.RequestURI()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, r.Method, url, bytes.NewReader(body))
	if err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return true
	}
	out.Header = r.Header.Clone()
	out.Header.Set(hopHeader, strconv.Itoa(hops+1))
	resp, err := s.client.Do(out)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "failed to forward to the leader: "+err.Error())
		return true
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
	return true
}

func (s *server) waitForLeader(ctx context.Context) raft.ServerAddress {
	deadline := time.Now().Add(s.rpcHold)
	for {
		if l := s.raft.Leader(); l != "" || time.Now().After(deadline) {
			return l
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(50 * time.Millisecond):
		}
	}
}
