#!/usr/bin/env python3
"""A scripted Raft stand-in for end-to-end tests of `kubectl raft yield`'s verdicts.

Not a Raft implementation: every replica of a StatefulSet runs this server on the same host
directory, and the cluster's state (leader, term, members) is one JSON file there. That lets a
test make a transfer go exactly wrong in a given way, which real servers do only by chance:

  behaviour "normal"     the leader hands over to the requested member, term + 1
  behaviour "elsewhere"  leadership goes to a member other than the requested one, term + 1
  behaviour "jump"       it goes to the requested member, but the term moves by 3 (an election)
  behaviour "delayed"    the request is acknowledged at once; the flip happens 1.5 s later
                         (as ClickHouse Keeper's ydld answers before anything happened)

HTTP (port --port):
  GET  /health              200 {"ok": true}
  GET  /status              {"id", "role", "leader", "term", "commit"}
  POST /transfer?to=NAME    only the leader accepts: 200 {}; 412 {"message": "not leader"}
"""
import argparse
import json
import os
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--state", required=True, help="the shared state directory")
ap.add_argument("--name", required=True, help="this member's name (the pod name)")
ap.add_argument("--port", type=int, default=8080)
args = ap.parse_args()
STATE = os.path.join(args.state, "state.json")
LOCK = threading.Lock()


def load():
    with open(STATE) as f:
        return json.load(f)


def save(state):
    tmp = f"{STATE}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, STATE)


def flip(to, term_step):
    with LOCK:
        s = load()
        s["leader"], s["term"] = to, s["term"] + term_step
        save(s)


class Handler(BaseHTTPRequestHandler):
    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass

    def do_GET(self):
        s = load()
        if self.path == "/health":
            return self.reply(200, {"ok": True})
        if self.path == "/status":
            role = "leader" if s["leader"] == args.name else "follower"
            return self.reply(200, {"id": args.name, "role": role, "leader": s["leader"],
                                    "term": s["term"], "commit": 100})
        self.reply(404, {"message": "no such path"})

    def do_POST(self):
        url = urllib.parse.urlparse(self.path)
        if url.path != "/transfer":
            return self.reply(404, {"message": "no such path"})
        to = urllib.parse.parse_qs(url.query).get("to", [""])[0]
        s = load()
        if s["leader"] != args.name:
            return self.reply(412, {"message": "not leader"})
        if to not in s["members"] or to == args.name:
            return self.reply(412, {"message": "bad leader transferee"})
        behaviour = s.get("behaviour", "normal")
        if behaviour == "elsewhere":
            other = next(m for m in s["members"] if m not in (to, args.name))
            flip(other, 1)
        elif behaviour == "jump":
            flip(to, 3)
        elif behaviour == "delayed":
            threading.Timer(1.5, flip, (to, 1)).start()
        else:
            flip(to, 1)
        self.reply(200, {})


ThreadingHTTPServer(("0.0.0.0", args.port), Handler).serve_forever()
