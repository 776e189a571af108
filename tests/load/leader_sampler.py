#!/usr/bin/env python3
"""Leader-presence sampling, for a system whose only Raft fact is "do I lead" (spurctld's REST
ping) and which offers no write a load client could make: every INTERVAL seconds each replica
in ENDPOINTS_FILE (one `name url` per line, rewritten as pods come and go) is asked at once. A
sample has a leader when exactly one replica says it leads, and a quorum when at least a
majority of MEMBERS replicas answer at all. On SIGTERM prints JSON: samples, the longest time
without a leader and the longest without a quorum of answering replicas (ms, from the last
sample with one to the next; resolution about INTERVAL), leader changes (by replica name).
Usage: leader_sampler.py ENDPOINTS_FILE MEMBERS [INTERVAL=0.05]"""
import concurrent.futures
import json
import signal
import sys
import time
import urllib.request

path, members = sys.argv[1], int(sys.argv[2])
interval = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
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


def leads(url):
    try:
        with urllib.request.urlopen(url + "/api/v1/ping", timeout=0.1) as r:
            return json.load(r)["ping"][0]["mode"] == "primary"
    except Exception:
        return None


class Stretch:
    """The longest time between two samples where a condition held."""

    def __init__(self):
        self.last, self.longest, self.held_last = None, 0.0, False

    def sample(self, now, held):
        if held:
            if self.last is not None:
                self.longest = max(self.longest, now - self.last)
            self.last = now
        self.held_last = held

    def end(self, now):
        if self.last is not None and not self.held_last:
            self.longest = max(self.longest, now - self.last)
        return round(self.longest * 1000)


pool = concurrent.futures.ThreadPoolExecutor(max_workers=8)
samples, changes, leader = 0, 0, None
with_leader, with_quorum = Stretch(), Stretch()
while not stop:
    t = time.monotonic()
    answers = list(pool.map(lambda e: (e[0], leads(e[1])), endpoints()))
    claimants = [n for n, a in answers if a]
    answering = sum(1 for _, a in answers if a is not None)
    now = time.monotonic()
    samples += 1
    if len(claimants) == 1:
        if leader is not None and claimants[0] != leader:
            changes += 1
        leader = claimants[0]
    with_leader.sample(now, len(claimants) == 1)
    with_quorum.sample(now, answering >= members // 2 + 1)
    time.sleep(max(0.0, interval - (time.monotonic() - t)))
now = time.monotonic()
print(json.dumps({"samples": samples, "longestLeaderlessMs": with_leader.end(now),
                  "longestWithoutQuorumMs": with_quorum.end(now), "leaderChanges": changes}))
