#!/usr/bin/env python3
"""Leader-presence sampling through each replica's own HTTP port: every INTERVAL seconds each
replica in ENDPOINTS_FILE (one `name url` per line, rewritten as pods come and go) is asked at
once. A sample has a leader when exactly one replica says it leads, and a quorum when at least
a majority of MEMBERS replicas answer at all. SYSTEM says what is asked and which Raft groups
are watched:
  spurctld   (default) REST /api/v1/ping: ping[0].mode = primary on the leader (no term; for
             a system whose only Raft fact is "do I lead" and which takes no write)
  etcd       POST /v3/maintenance/status: member_id = leader; raftTerm
  zookeeper  the AdminServer's /commands/zabstate: is_leader in zabstate "broadcast"; the ZAB
             epoch (zab_epoch) as the term: a new epoch is a new election
  nats       /raftz and /raftz?acc=APP: two groups, the JetStream meta group (SYS/_meta_) and
             the first stream group of account APP (S-...): state LEADER; term
On SIGTERM prints JSON: samples, the longest time without a leader and the longest without a
quorum of answering replicas (ms, from the last sample with one to the next; resolution about
INTERVAL), leader changes (by replica name); and per group under "groups": the same, every
stretch without a leader and without a quorum (ms), the terms advanced, and each leader change
with the time without a leader before it (gapMs) and the terms it advanced.
Usage: leader_sampler.py ENDPOINTS_FILE MEMBERS [INTERVAL=0.05] [SYSTEM=spurctld]"""
import concurrent.futures
import json
import signal
import sys
import time
import urllib.request

path, members = sys.argv[1], int(sys.argv[2])
interval = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
system = sys.argv[4] if len(sys.argv) > 4 else "spurctld"
timeout = max(0.1, min(0.5, 2 * interval))
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)


def endpoints():
    try:
        return [l.split() for l in open(path) if len(l.split()) == 2]
    except OSError:
        return []


def get(url, body=None):
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def ask(url):
    """{group: (leads, term)} as this replica answers, or None when it does not answer."""
    try:
        if system == "spurctld":
            return {"leader": (get(url + "/api/v1/ping")["ping"][0]["mode"] == "primary", None)}
        if system == "etcd":
            v = get(url + "/v3/maintenance/status", b"{}")
            return {"leader": (v["header"]["member_id"] == v.get("leader"), int(v["raftTerm"]))}
        if system == "zookeeper":
            v = get(url + "/commands/zabstate")
            if v.get("error"):
                return None  # not serving (in an election)
            return {"leader": (bool(v["is_leader"]) and v["zabstate"] == "broadcast", int(v["zab_epoch"]))}
        if system == "nats":
            v, app = get(url + "/raftz"), get(url + "/raftz?acc=APP")
            out = {}
            meta = v.get("SYS", {}).get("_meta_")
            if meta:
                out["meta"] = (meta["state"] == "LEADER", int(meta["term"]))
            stream = next((g for n, g in sorted(app.get("APP", {}).items()) if n.startswith("S-")), None)
            if stream:
                out["stream"] = (stream["state"] == "LEADER", int(stream["term"]))
            return out
    except Exception:
        return None
    raise SystemExit(f"unknown system {system}")


class Stretch:
    """The time between two samples where a condition held, each time it did not hold in between."""

    def __init__(self):
        self.last, self.longest, self.held_last, self.all = None, 0.0, False, []

    def sample(self, now, held):
        if held:
            if self.last is not None:
                gap = now - self.last
                self.longest = max(self.longest, gap)
                if not self.held_last:
                    self.all.append(round(gap * 1000))
            self.last = now
        self.held_last = held

    def end(self, now):
        if self.last is not None and not self.held_last:
            self.longest = max(self.longest, now - self.last)
            self.all.append(round((now - self.last) * 1000))
        return round(self.longest * 1000)


class Group:
    def __init__(self):
        self.with_leader, self.with_quorum = Stretch(), Stretch()
        self.leader, self.leader_seen, self.leader_term = None, None, None
        self.first_term, self.last_term, self.changes = None, None, []

    def sample(self, now, answers):
        """answers: [(name, (leads, term) or None)] for this group."""
        claimants = [n for n, a in answers if a and a[0]]
        answering = sum(1 for _, a in answers if a is not None)
        terms = [a[1] for _, a in answers if a and a[1] is not None]
        term = max(terms) if terms else None
        if term is not None:
            self.first_term = term if self.first_term is None else self.first_term
            self.last_term = term if self.last_term is None else max(self.last_term, term)
        if len(claimants) == 1:
            if self.leader is not None and claimants[0] != self.leader:
                self.changes.append({"from": self.leader, "to": claimants[0],
                                     "gapMs": round((now - self.leader_seen) * 1000),
                                     "terms": (term - self.leader_term) if term is not None and self.leader_term is not None else None})
            self.leader, self.leader_seen, self.leader_term = claimants[0], now, term
        self.with_leader.sample(now, len(claimants) == 1)
        self.with_quorum.sample(now, answering >= members // 2 + 1)

    def summary(self, now):
        return {"longestLeaderlessMs": self.with_leader.end(now),
                "longestWithoutQuorumMs": self.with_quorum.end(now),
                "leaderChanges": len(self.changes),
                "leaderlessMs": self.with_leader.all, "withoutQuorumMs": self.with_quorum.all,
                "termsAdvanced": (self.last_term - self.first_term) if self.first_term is not None else None,
                "changes": self.changes}


pool = concurrent.futures.ThreadPoolExecutor(max_workers=8)
samples, groups = 0, {}
names = {"nats": ["meta", "stream"]}.get(system, ["leader"])
for g in names:
    groups[g] = Group()
while not stop:
    t = time.monotonic()
    answers = list(pool.map(lambda e: (e[0], ask(e[1])), endpoints()))
    now = time.monotonic()
    samples += 1
    for g, group in groups.items():
        # A replica that answers but has no such group (a stream not created yet) answers
        # nothing for it.
        group.sample(now, [(n, a.get(g) if a is not None else None) for n, a in answers])
    time.sleep(max(0.0, interval - (time.monotonic() - t)))
now = time.monotonic()
out = {g: group.summary(now) for g, group in groups.items()}
first = out[names[0]]
print(json.dumps({"samples": samples, "longestLeaderlessMs": first["longestLeaderlessMs"],
                  "longestWithoutQuorumMs": first["longestWithoutQuorumMs"], "leaderChanges": first["leaderChanges"],
                  "groups": out}))
