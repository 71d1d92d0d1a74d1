#!/usr/bin/python3
"""A scripted stand-in for Resend's HTTP API (POST /emails) for Jotter's delivery tests.

Run with /usr/bin/python3. It listens on 127.0.0.1 (--port, 0 by default) and prints the port it
got on the first line of standard output; it exits when its standard input closes or on SIGTERM.
With --cert and --key it speaks HTTPS.

--script FILE is a JSON list: the Nth request that is not answered from the idempotency store
takes the Nth entry; when the list runs out every request is accepted. Entries:
  {}                              accept: send the email, 200 {"id": ...}
  {"status": 500}                 answer with that status (a 2xx sends the email); optional
                                  "retry_after": "1" or an HTTP-date, and "body": {...} (JSON)
  {"hang": 5}                     read the request, say nothing for 5 s, then close
  {"reset": true}                 read the request, then reset the connection (RST)
  {"accept_then_drop": true}      send the email (and remember the key), then close without answering
  {"close_when_idle": "fin"}      accept, keeping the connection alive, then treat it as closed while idle:
                                  the next request on it crossed the close, reaches no one (no step, no
                                  email) and gets no answer; the connection ends with a FIN ("reset": RST)
  any entry may add "delay_ms": N (and --delay-ms N applies to every request)

Idempotency as Resend documents it: a request whose Idempotency-Key was used for an email already
sent gets that first response again when its body is byte-identical (nothing is sent), and
409 invalid_idempotent_request when the body differs; a key still being processed gets
409 concurrent_idempotent_requests.

Records in --record DIR (JSON lines, flushed before the response goes out):
  requests.jsonl   every request: n, time, connection (numbered from 1 in order of first request),
                   method, path, headers (lowercased), body (base64), action (closed_idle for one
                   that crossed a close), concurrent (requests in progress when it arrived, itself included)
  emails.jsonl     every email actually sent: id, key, time, body (base64)
"""

import argparse
import base64
import json
import os
import socket
import ssl
import struct
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fixture_lifetime import exit_when_stdin_closes


class Relay:
    def __init__(self, script, record_dir, delay_ms):
        self.lock = threading.Lock()
        self.record_lock = threading.Lock()
        self.script = script
        self.next_step = 0
        self.count = 0
        self.connections = 0
        self.in_progress = 0
        self.sent = {}        # Idempotency-Key -> (body bytes, status, response object)
        self.pending = set()  # keys of requests being processed now
        self.delay = delay_ms / 1000
        self.requests = open(os.path.join(record_dir, "requests.jsonl"), "a")
        self.emails = open(os.path.join(record_dir, "emails.jsonl"), "a")

    def record(self, file, entry):
        with self.record_lock:
            file.write(json.dumps(entry) + "\n")
            file.flush()

    def decide(self, handler, key, body):
        """(step, action) for this request, under the lock."""
        if getattr(handler, "closed_when_idle", None):
            return {"close_with": handler.closed_when_idle}, "closed_idle"
        if handler.command != "POST" or handler.path != "/emails":
            return {"status": 404, "body": {"name": "not_found"}}, "not_found"
        if key is not None and key in self.sent:
            first_body, status, response = self.sent[key]
            if first_body == body:
                return {"status": status, "body": response, "replay": True}, "replay"
            return ({"status": 409, "body": {"statusCode": 409, "name": "invalid_idempotent_request",
                                             "message": "Same idempotency key used with a different payload."}},
                    "mismatch")
        if key is not None and key in self.pending:
            return ({"status": 409, "body": {"statusCode": 409, "name": "concurrent_idempotent_requests",
                                             "message": "Same idempotency key is still being processed."}},
                    "concurrent")
        step = self.script[self.next_step] if self.next_step < len(self.script) else {}
        self.next_step += 1
        if "hang" in step:
            return step, "hang"  # stuck before processing: the key is not held
        if step.get("reset"):
            return step, "reset"
        if "status" in step and not 200 <= step["status"] < 300:
            return step, "status %d" % step["status"]
        if key is not None:
            self.pending.add(key)  # being processed: a concurrent request with this key gets a 409
        return step, "accept_then_drop" if step.get("accept_then_drop") else "accept"

    def send_email(self, key, body):
        email_id = str(uuid.uuid4())
        response = {"id": email_id}
        with self.lock:
            if key is not None:
                self.sent[key] = (body, 200, response)
        self.record(self.emails, {"id": email_id, "key": key, "time": time.time(),
                                  "body": base64.b64encode(body).decode()})
        return response

    def handle(self, handler):
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length > 0 else b""
        arrived = time.time()
        key = handler.headers.get("Idempotency-Key")
        with self.lock:
            self.count += 1
            self.in_progress += 1
            if not hasattr(handler, "connection_number"):
                self.connections += 1
                handler.connection_number = self.connections
            number, concurrent, connection = self.count, self.in_progress, handler.connection_number
            step, action = self.decide(handler, key, body)
        try:
            self.record(self.requests, {
                "n": number, "time": arrived, "connection": connection, "method": handler.command, "path": handler.path,
                "headers": {name.lower(): value for name, value in handler.headers.items()},
                "body": base64.b64encode(body).decode(), "action": action, "concurrent": concurrent,
            })
            delay = self.delay + step.get("delay_ms", 0) / 1000
            if delay:
                time.sleep(delay)
            self.act(handler, key, body, step, action)
        finally:
            with self.lock:
                self.in_progress -= 1
                if action in ("accept", "accept_then_drop"):
                    self.pending.discard(key)

    def act(self, handler, key, body, step, action):
        if action == "hang":
            time.sleep(step["hang"])
            close(handler)
        elif action == "reset":
            reset(handler)
        elif action == "closed_idle":
            (reset if step["close_with"] == "reset" else close)(handler)
        elif action == "accept_then_drop":
            self.send_email(key, body)
            close(handler)
        elif action == "accept":
            response = self.send_email(key, body)
            respond(handler, step.get("status", 200), response)
            if step.get("close_when_idle"):
                # Alive as far as the client can tell, closed as far as we are concerned. (Closing the
                # socket now would be seen: libcurl does not reuse a connection that has turned readable.
                # A server's idle close that crosses the client's next request on the wire is not seen.)
                handler.closed_when_idle = step["close_when_idle"]
        elif action == "replay":
            respond(handler, step["status"], step["body"])
        else:
            status = step["status"]
            payload = step.get("body") or {"statusCode": status, "name": "scripted_error"}
            # Like many real APIs, the error text quotes the request: Jotter must not pass it on.
            payload = dict(payload, message=payload.get("message", "scripted failure for: ")
                           + body.decode("utf-8", "replace")[:200])
            respond(handler, status, payload, step.get("retry_after"))


def respond(handler, status, payload, retry_after=None):
    data = json.dumps(payload).encode()
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            handler.send_header("Retry-After", retry_after)
        handler.end_headers()
        handler.wfile.write(data)
    except OSError:
        handler.close_connection = True


def close(handler):
    """An orderly close (FIN) with nothing said."""
    handler.close_connection = True
    try:
        handler.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def reset(handler):
    """A reset (RST): linger 0, then close once the handler lets go of the socket."""
    handler.close_connection = True
    try:
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()
    except OSError:
        pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the real API: Jotter reuses its connection
    server_version = "ScriptedRelay/1"

    def log_message(self, format, *args):
        pass

    def do_POST(self):
        self.server.relay.handle(self)

    def do_GET(self):
        self.server.relay.handle(self)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # a client that went away (a timeout, a reset) is part of the script



def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", help="a JSON file: the list of scripted answers")
    parser.add_argument("--record", required=True, help="directory for requests.jsonl and emails.jsonl")
    parser.add_argument("--delay-ms", type=int, default=0, help="wait this long before every answer")
    parser.add_argument("--cert", help="serve HTTPS with this certificate chain (PEM)")
    parser.add_argument("--key", help="and this private key (PEM)")
    args = parser.parse_args()
    script = []
    if args.script:
        with open(args.script) as f:
            script = json.load(f)
    server = Server(("127.0.0.1", args.port), Handler)
    server.relay = Relay(script, args.record, args.delay_ms)
    if args.cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)
        # A failed handshake (a client that does not trust us) is an OSError in accept(): no request.
        server.socket = context.wrap_socket(server.socket, server_side=True)
    exit_when_stdin_closes()
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
