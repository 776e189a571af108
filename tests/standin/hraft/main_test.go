package main

// Three voters and a non-voter in one process, on 127.0.0.31-34 (the same HTTP port on each
// address, as pods have): election, the configuration's Voter flags, a write through a
// follower, autopilot health, a targeted transfer, and the Consul error text for a bad target.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

const testHTTPPort, testRaftPort = "28500", "28300"

func startCluster(t *testing.T) []*server {
	var voters, nonvoters []raft.Server
	for i := 1; i <= 4; i++ {
		srv := raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprintf("s%d", i)),
			Address: raft.ServerAddress(fmt.Sprintf("127.0.0.3%d:%s", i, testRaftPort))}
		if i == 4 {
			srv.Suffrage = raft.Nonvoter
			nonvoters = append(nonvoters, srv)
		} else {
			voters = append(voters, srv)
		}
	}
	var out []*server
	for i := 1; i <= 4; i++ {
		host := fmt.Sprintf("127.0.0.3%d", i)
		s, err := newServer(config{
			id: fmt.Sprintf("s%d", i), httpAddr: host + ":" + testHTTPPort, raftAddr: host + ":" + testRaftPort,
			dataDir: t.TempDir(), voters: voters, nonvoters: nonvoters, dc: "dc1", version: "1.21.0-standin",
			raftMultiplier: 1, rpcHold: 7 * time.Second, healthInterval: 250 * time.Millisecond,
			lastContact: 200 * time.Millisecond, maxTrailingLogs: 250, serfFailAfter: 2 * time.Second,
		}, hclog.New(&hclog.LoggerOptions{Output: io.Discard}))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", s.http.Addr)
		if err != nil {
			t.Fatal(err)
		}
		go s.http.Serve(ln)
		t.Cleanup(s.shutdown)
		out = append(out, s)
	}
	return out
}

func call(t *testing.T, method, url string, out interface{}) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader("v"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, body)
		}
	}
	return resp.StatusCode, string(body)
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestClusterSpeaksConsul(t *testing.T) {
	servers := startCluster(t)
	api := func(i int, path string) string { return fmt.Sprintf("http://127.0.0.3%d:%s%s", i, testHTTPPort, path) }

	var leader string
	eventually(t, "a leader", func() bool {
		call(t, "GET", api(4, "/v1/status/leader"), &leader)
		return leader != ""
	})

	var cfg struct {
		Servers []raftServer
		Index   uint64
	}
	call(t, "GET", api(4, "/v1/operator/raft/configuration"), &cfg)
	if len(cfg.Servers) != 4 || !cfg.Servers[0].Voter || cfg.Servers[3].Voter || cfg.Servers[3].ID != "s4" {
		t.Fatalf("configuration: %+v", cfg)
	}

	if code, body := call(t, "PUT", api(4, "/v1/kv/k"), nil); code != 200 || body != "true" {
		t.Fatalf("PUT through the non-voter: %d %s", code, body)
	}
	if code, body := call(t, "GET", api(2, "/v1/kv/k?raw"), nil); code != 200 || body != "v" {
		t.Fatalf("GET: %d %s", code, body)
	}

	var health healthReply
	eventually(t, "a healthy cluster", func() bool {
		code, _ := call(t, "GET", api(1, "/v1/operator/autopilot/health"), &health)
		return code == 200 && health.Healthy && len(health.Servers) == 4
	})
	if health.FailureTolerance != 1 {
		t.Fatalf("3 healthy voters tolerate 1 failure: %+v", health)
	}

	// Transfer to a voter that is not the leader, sent to another follower (forwarded).
	var target, via int
	for i, s := range servers[:3] {
		if s.raft.State() != raft.Leader {
			if target == 0 {
				target = i + 1
			} else {
				via = i + 1
			}
		}
	}
	var ok map[string]bool
	if code, body := call(t, "POST", api(via, fmt.Sprintf("/v1/operator/raft/transfer-leader?id=s%d", target)), &ok); code != 200 || !ok["Success"] {
		t.Fatalf("transfer: %d %s", code, body)
	}
	eventually(t, "the target leading", func() bool {
		call(t, "GET", api(4, "/v1/status/leader"), &leader)
		return leader == fmt.Sprintf("127.0.0.3%d:%s", target, testRaftPort)
	})

	code, body := call(t, "POST", api(1, "/v1/operator/raft/transfer-leader?id=nope"), nil)
	if code != 500 || body != "rpc error: code = Unknown desc = Could not find address for server id nope" {
		t.Fatalf("unknown target: %d %s", code, body)
	}
}
