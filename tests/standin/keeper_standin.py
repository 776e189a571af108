#!/usr/bin/env python3
"""A STAND-IN for ClickHouse Keeper, for the end-to-end tests. It is not Keeper.

ClickHouse Keeper cannot run on this project's machines (docs/systems/clickhouse-keeper.md),
so the tests run this instead. It speaks Keeper's documented interfaces, as the shared
reference (section 1) and the seed (shared/seeds/000_270aec6168b1762c.txt) describe them,
and reproduces the timing that matters to `kubectl raft`:

  GET /ready  on http_control (--http-port, 9123):
      {"details":{"role":"leader|follower","hasLeader":true|false},"status":"ok|fail"}
      HTTP 200 when this replica leads, or follows and knows a leader; else 503.
  The commands API on http_control (--commands-api):
      query  (26.x) GET /api/v1/commands[/<anything>]?command=<cmd> -> 200 {"result": "<4lw text>"};
             no ?command -> 400 {"message": "Invalid command"}
      path   (the older handler) GET /api/v1/commands/<cmd> -> the same; an unknown command
             -> 400 {"message":"Invalid four letter command."}; one not in --allow
             -> 403 {"message":"Command is disabled. Check server settings."}
      none   (older than the commands API, a 25.8-style server) -> 404
  Four-letter words on the client port (--client-port, 2181): write 4 bytes, read to EOF;
      unknown or not allowed -> no reply. ruok, srvr, mntr, lgif, ydld, rqld.

  ydld  answers "Sent yield leadership request to leader." at once, on any replica. On the
        leader it starts a handover: writes pause while the successor catches up
        (--catch-up, 0.3 s), then the leader resigns and for --gap (0.1 s) no replica has a
        leader (/ready 503, hasLeader false), then the successor leads at term + 1.
  rqld  on a follower: the same handover, to that follower. "Sent leadership request to leader."
  SIGTERM does NO handover (Keeper's shutdown does none): a leader that stops leaves the
        others leaderless until an election, --election-timeout (1.5 s) later, at term + 1.

All replicas share one state directory (--state, a hostPath in the tests): state.json holds
the leader, term, commit index, the replicas' heartbeats and the pending handover, guarded by
flock; events.log records every handover, resignation and election, so tests can count
elections. A replica whose heartbeat is older than 1 s is dead.
"""
import argparse
import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--state", required=True, help="the shared state directory")
ap.add_argument("--name", required=True, help="this replica's name (the pod name)")
ap.add_argument("--replicas", type=int, default=3)
ap.add_argument("--http-port", type=int, default=9123)
ap.add_argument("--client-port", type=int, default=2181)
ap.add_argument("--commands-api", choices=["query", "path", "none"], default="query")
ap.add_argument("--allow", default="conf,cons,crst,envi,ruok,srst,srvr,stat,wchs,dirs,mntr,isro,rcvr,apiv,csnp,lgif,rqld,rclc,clrs,ftfl,ydld,pfev")
ap.add_argument("--catch-up", type=float, default=0.3)
ap.add_argument("--gap", type=float, default=0.1)
ap.add_argument("--election-timeout", type=float, default=1.5)
args = ap.parse_args()

STATE = os.path.join(args.state, "state.json")
LOCKFILE = os.path.join(args.state, "state.lock")
EVENTS = os.path.join(args.state, "events.log")
BASE = args.name.rsplit("-", 1)[0]
MEMBERS = [f"{BASE}-{i}" for i in range(args.replicas)]
ALLOWED = set(args.allow.split(","))
DEAD_AFTER = 1.0
VERSION = "v26.7.5.10-standin"


class Locked:
    """The shared state, read under an exclusive flock and written back on exit."""

    def __enter__(self):
        self.fd = open(LOCKFILE, "a+")
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            with open(STATE) as f:
                self.s = json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):
            self.s = {"leader": None, "term": 1, "commit": 0, "alive": {}, "handover": None,
                      "leaderless_since": None, "elections": 0, "transfers": 0}
        return self.s

    def __exit__(self, *exc):
        tmp = f"{STATE}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.s, f)
        os.replace(tmp, STATE)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        self.fd.close()


def event(what):
    with open(EVENTS, "a") as f:
        f.write(f"{time.time():.3f} {args.name} {what}\n")


def live(s, now):
    return sorted(n for n, t in s["alive"].items() if now - t <= DEAD_AFTER)


def tick():
    """Heartbeat, the leader's writes, the pending handover, crash detection, elections."""
    now = time.time()
    with Locked() as s:
        s["alive"][args.name] = now
        alive = live(s, now)
        if s["leader"] == args.name and not s["handover"]:
            s["commit"] += 5
        h = s["handover"]
        if h:
            if s["leader"] == h["from"] and now >= h["resign_at"]:
                s["leader"], s["leaderless_since"] = None, now
                event(f"resigned {h['from']}")
            if now >= h["lead_at"]:
                s["handover"] = None
                if h["to"] in alive:
                    s["leader"], s["term"], s["leaderless_since"] = h["to"], s["term"] + 1, None
                    s["transfers"] += 1
                    event(f"transferred {h['from']} -> {h['to']} term {s['term']}")
            return
        if s["leader"] is not None and s["leader"] not in alive:
            event(f"lost leader {s['leader']}")
            s["leader"], s["leaderless_since"] = None, now
        if s["leader"] is None and len(alive) * 2 > len(MEMBERS):
            since = s["leaderless_since"] or now
            s["leaderless_since"] = since
            if now - since >= args.election_timeout:
                s["leader"], s["term"], s["leaderless_since"] = alive[0], s["term"] + 1, None
                s["elections"] += 1
                event(f"elected {alive[0]} term {s['term']}")


def ticker():
    while True:
        try:
            tick()
        except Exception as e:  # keep beating; say what went wrong
            print(f"tick: {e}", file=sys.stderr, flush=True)
        time.sleep(0.05)


def view():
    with Locked() as s:
        return dict(s)


def role_of(s):
    return "leader" if s["leader"] == args.name else "follower"


def handover(to):
    now = time.time()
    with Locked() as s:
        if s["leader"] is None or s["handover"] or to == s["leader"]:
            return
        if to is None:
            others = [n for n in live(s, now) if n != s["leader"]]
            if not others:
                return
            to = others[0]
        s["handover"] = {"from": s["leader"], "to": to, "resign_at": now + args.catch_up,
                         "lead_at": now + args.catch_up + args.gap}
        event(f"handover {s['leader']} -> {to} requested")


def four_letter(cmd):
    """The text Keeper answers for a four-letter word, or None for no reply."""
    if cmd not in ALLOWED:
        return None
    s = view()
    role, has_leader = role_of(s), s["leader"] is not None
    if cmd == "ruok":
        return "imok"
    if cmd == "srvr":
        return (f"ClickHouse Keeper version: {VERSION}\nLatency min/avg/max: 0/0/0\nReceived: 0\n"
                f"Sent: 0\nConnections: 0\nOutstanding: 0\nZxid: 0x{s['commit']:x}\n"
                f"Mode: {role}\nNode count: 4\n")
    if cmd == "mntr":
        lines = [("zk_version", VERSION), ("zk_server_state", role),
                 ("zk_znode_count", "4")]
        if role == "leader":
            n = len(live(s, time.time())) - 1
            lines += [("zk_followers", str(n)), ("zk_synced_followers", str(n))]
        return "".join(f"{k}\t{v}\n" for k, v in lines)
    if cmd == "lgif":
        c = s["commit"]
        return (f"first_log_idx\t1\nfirst_log_term\t1\nlast_log_idx\t{c}\nlast_log_term\t{s['term']}\n"
                f"last_committed_log_idx\t{c}\nleader_committed_log_idx\t{c if has_leader else 0}\n"
                f"target_committed_log_idx\t{c}\nlast_snapshot_idx\t0\n")
    if cmd == "ydld":
        if s["leader"] == args.name:
            handover(None)
        return "Sent yield leadership request to leader."
    if cmd == "rqld":
        if s["leader"] not in (None, args.name):
            handover(args.name)
        return "Sent leadership request to leader."
    return None


class Http(BaseHTTPRequestHandler):
    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        if url.path == "/ready":
            s = view()
            role, has_leader = role_of(s), s["leader"] is not None
            ok = role == "leader" or has_leader
            return self.reply(200 if ok else 503, {"details": {"role": role, "hasLeader": has_leader},
                                                   "status": "ok" if ok else "fail"})
        if url.path == "/api/v1/commands" or url.path.startswith("/api/v1/commands/"):
            if args.commands_api == "none":
                return self.reply(404, {"message": "Not found"})
            if args.commands_api == "query":
                cmd = urllib.parse.parse_qs(url.query).get("command", [None])[0]
                if not cmd:
                    return self.reply(400, {"message": "Invalid command"})
                text = four_letter(cmd) if cmd in ALLOWED else None
                return self.reply(200, {"result": text if text is not None else ""})
            parts = url.path.split("/")
            cmd = parts[4] if len(parts) > 4 else ""
            if len(cmd) != 4 or not cmd.isalpha():
                return self.reply(400, {"message": "Invalid four letter command."})
            if cmd not in ALLOWED:
                return self.reply(403, {"message": "Command is disabled. Check server settings."})
            text = four_letter(cmd)
            if text is None:
                return self.reply(400, {"message": "Invalid four letter command."})
            return self.reply(200, {"result": text})
        self.reply(404, {"message": "Not found"})

    def log_message(self, *a):
        pass


def serve_four_letter_words():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", args.client_port))
    srv.listen(16)
    while True:
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(2)
            try:
                cmd = conn.recv(4).decode(errors="replace")
                text = four_letter(cmd)
                if text is not None:
                    conn.sendall(text.encode())
            except OSError:
                pass


def stop(*_):
    # Keeper's shutdown does no handover: the replica just goes.
    with Locked() as s:
        s["alive"].pop(args.name, None)
        if s["leader"] == args.name:
            s["leader"], s["leaderless_since"], s["handover"] = None, time.time(), None
            event(f"stopped while leading {args.name}")
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
threading.Thread(target=ticker, daemon=True).start()
threading.Thread(target=serve_four_letter_words, daemon=True).start()
event("started")
ThreadingHTTPServer(("0.0.0.0", args.http_port), Http).serve_forever()
