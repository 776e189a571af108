package main

// Server health as Consul's autopilot computes it on the leader (hashicorp/raft-autopilot,
// state.go and types.go): every ServerHealthInterval the leader fetches each server's own
// Raft stats (Consul: the Status.RaftStats RPC, which reads last_contact, last_log_index and
// last_log_term from raft.Stats(); here: GET /v1/agent/self, the same numbers) with a
// deadline of half the interval, and judges each server against the leader's last index and
// term. hashicorp/raft does not expose a follower's last contact to the leader, so this is
// how the leader learns it, as in Consul.
//
// Where the stand-in differs from Consul: Consul keeps a silent server's last fetched stats
// and relies on Serf's failure detector (seconds) to mark it "failed". Here a silent server's
// LastContact keeps growing (its last reported value plus the time since that answer), so it
// turns unhealthy once LastContactThreshold passes, and SerfStatus reads "failed" after
// serfFailAfter without an answer.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// readableDuration is encoded as Consul's api.ReadableDuration: a Go duration string ("0s",
// "12.5ms").
type readableDuration time.Duration

func (d readableDuration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}

func (d *readableDuration) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = readableDuration(v)
	return err
}

// serverHealth is Consul's api.ServerHealth, field for field and in its order.
type serverHealth struct {
	ID          string
	Name        string
	Address     string
	SerfStatus  string
	Version     string
	Leader      bool
	LastContact readableDuration
	LastTerm    uint64
	LastIndex   uint64
	Healthy     bool
	Voter       bool
	StableSince time.Time
}

// healthReply is Consul's api.OperatorHealthReply.
type healthReply struct {
	Healthy          bool
	FailureTolerance int
	Servers          []serverHealth
}

// raftStats is what a server reports about itself (Consul's structs.RaftStats).
type raftStats struct {
	LastContact time.Duration
	LastTerm    uint64
	LastIndex   uint64
}

// tracked is the leader's memory of one server between rounds.
type tracked struct {
	name, version string
	stats         raftStats
	heard         time.Time // the last answer (or when tracking began)
	healthy       bool
	stableSince   time.Time
}

type pilot struct {
	s             *server
	interval      time.Duration // Consul: ServerHealthInterval (2s by default)
	threshold     time.Duration // LastContactThreshold (200ms)
	maxTrailing   uint64        // MaxTrailingLogs (250)
	serfFailAfter time.Duration

	mu      sync.Mutex
	servers map[raft.ServerID]*tracked
	reply   *healthReply // nil until the first round as leader
}

func (p *pilot) run(stop <-chan struct{}) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if p.s.raft.State() != raft.Leader {
			// Consul runs autopilot only on the leader.
			p.mu.Lock()
			p.servers, p.reply = nil, nil
			p.mu.Unlock()
			continue
		}
		p.round()
	}
}

// health is the last computed reply, or nil before the first round.
func (p *pilot) health() *healthReply {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reply
}

// lastIndex is the last log index the leader knows a server to have (0 if unknown), for
// /v1/operator/raft/configuration's LastIndex (Consul reads it from autopilot's state).
func (p *pilot) lastIndex(id raft.ServerID) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.servers[id]; ok {
		return t.stats.LastIndex
	}
	return 0
}

func (p *pilot) round() {
	r := p.s.raft
	f := r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	cfg := f.Configuration()
	_, leaderID := r.LeaderWithID()
	leaderIndex := r.LastIndex()
	own := r.Stats()
	leaderTerm, _ := strconv.ParseUint(own["last_log_term"], 10, 64)

	// Fetch every server's stats in parallel, for at most half the interval.
	ctx, cancel := context.WithTimeout(context.Background(), p.interval/2)
	defer cancel()
	type answer struct {
		id            raft.ServerID
		name, version string
		stats         raftStats
	}
	answers := make(chan answer, len(cfg.Servers))
	var wg sync.WaitGroup
	for _, srv := range cfg.Servers {
		if srv.ID == p.s.id {
			answers <- answer{srv.ID, string(p.s.id), p.s.version, statsOf(own)}
			continue
		}
		wg.Add(1)
		go func(srv raft.Server) {
			defer wg.Done()
			if name, version, st, err := p.s.fetchSelf(ctx, srv.Address); err == nil {
				answers <- answer{srv.ID, name, version, st}
			}
		}(srv)
	}
	wg.Wait()
	close(answers)

	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.servers
	p.servers = map[raft.ServerID]*tracked{}
	for _, srv := range cfg.Servers {
		t := prev[srv.ID]
		if t == nil {
			t = &tracked{name: string(srv.ID), heard: now}
		}
		p.servers[srv.ID] = t
	}
	for a := range answers {
		t := p.servers[a.id]
		t.name, t.version, t.stats, t.heard = a.name, a.version, a.stats, now
	}

	reply := &healthReply{Healthy: true, Servers: []serverHealth{}}
	voters, healthyVoters := 0, 0
	for _, srv := range cfg.Servers {
		t := p.servers[srv.ID]
		silent := now.Sub(t.heard)
		lastContact := t.stats.LastContact
		if silent > 0 {
			lastContact += silent
		}
		serf := "alive"
		if silent > p.serfFailAfter {
			serf = "failed"
		}
		// raft-autopilot's isHealthy.
		healthy := leaderIndex != 0 && leaderTerm != 0 && serf == "alive" &&
			lastContact >= 0 && lastContact <= p.threshold &&
			t.stats.LastTerm == leaderTerm &&
			t.stats.LastIndex+p.maxTrailing >= leaderIndex
		if t.stableSince.IsZero() || healthy != t.healthy {
			t.healthy, t.stableSince = healthy, now
		}
		voter := srv.Suffrage == raft.Voter
		if voter {
			voters++
			if healthy {
				healthyVoters++
			}
		}
		// raft-autopilot: any unhealthy server, voter or not, makes the cluster unhealthy.
		if !healthy {
			reply.Healthy = false
		}
		reply.Servers = append(reply.Servers, serverHealth{
			ID:          string(srv.ID),
			Name:        t.name,
			Address:     string(srv.Address),
			SerfStatus:  serf,
			Version:     t.version,
			Leader:      srv.ID == leaderID,
			LastContact: readableDuration(lastContact),
			LastTerm:    t.stats.LastTerm,
			LastIndex:   t.stats.LastIndex,
			Healthy:     healthy,
			Voter:       voter,
			// Consul's HTTP handler rounds StableSince to the second, in UTC.
			StableSince: t.stableSince.Round(time.Second).UTC(),
		})
	}
	if quorum := voters/2 + 1; healthyVoters > quorum {
		reply.FailureTolerance = healthyVoters - quorum
	}
	p.reply = reply
}

// statsOf reads a server's report from hashicorp/raft's Stats() map, as Consul's
// Status.RaftStats does ("never" and other unparsable last_contact values read as 0, as
// Consul's time.ParseDuration with the error ignored gives).
func statsOf(m map[string]string) raftStats {
	var st raftStats
	st.LastContact, _ = time.ParseDuration(m["last_contact"])
	st.LastIndex, _ = strconv.ParseUint(m["last_log_index"], 10, 64)
	st.LastTerm, _ = strconv.ParseUint(m["last_log_term"], 10, 64)
	return st
}

// fetchSelf asks the server at a Raft address for its /v1/agent/self (its API port is
// ours, on the same host).
func (s *server) fetchSelf(ctx context.Context, addr raft.ServerAddress) (name, version string, st raftStats, err error) {
	host, _, err := net.SplitHostPort(string(addr))
	if err != nil {
		return
	}
	url := s.apiScheme + "://" + net.JoinHostPort(host, s.apiPort) + "/v1/agent/self"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", url, resp.Status)
		return
	}
	var self struct {
		Config struct{ NodeName, Version string }
		Stats  struct{ Raft map[string]string }
	}
	if err = json.NewDecoder(resp.Body).Decode(&self); err != nil {
		return
	}
	return self.Config.NodeName, self.Config.Version, statsOf(self.Stats.Raft), nil
}
