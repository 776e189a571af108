#!/usr/bin/env python3
"""One NATS request over the raw client protocol, its reply on stdout (exit 1: none).

For the demo and the benchmarks, which need a JetStream API call (create a stream, step a
stream's leader down) without a NATS CLI:
    python3 tests/load/nats_request.py IP USER PASSWORD SUBJECT [BODY]
"""
import json
import socket
import sys

ip, user, password, subject = sys.argv[1:5]
body = sys.argv[5] if len(sys.argv) > 5 else ""
try:
    s = socket.create_connection((ip, 4222), timeout=3)
    f = s.makefile("rb")
    f.readline()  # INFO
    s.sendall(("CONNECT %s\r\nSUB _INBOX.r 1\r\nPUB %s _INBOX.r %d\r\n%s\r\n" % (
        json.dumps({"user": user, "pass": password, "verbose": False}),
        subject, len(body.encode()), body)).encode())
    while True:
        line = f.readline()
        if not line or line.startswith(b"-ERR"):
            sys.exit("no reply: %s" % line.decode().strip())
        if line.startswith(b"MSG"):
            print(f.read(int(line.split()[-1]) + 2).decode().strip())
            break
except OSError as e:  # not up yet, or no reply within 3 s
    sys.exit("%s:4222 %s: %s" % (ip, subject, e))
