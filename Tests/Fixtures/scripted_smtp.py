#!/usr/bin/python3
"""An SMTP server on 127.0.0.1 that misbehaves on cue, for what a real server (smtp_server.py, aiosmtpd)
cannot be made to do: refuse the connection in its greeting or its EHLO answer, take a whole message and
hang up without answering, answer the end of DATA with any reply, close an idle connection with 421.
Plain SMTP only (tests use ?tls=none). Prints the port it bound, then serves until its standard input
closes.

control.json in OUTDIR is read at every step (the test may rewrite it), each key optional:
  {"greeting": "554 5.7.1 blocked", "ehlo": "550 no", "mail": "...", "rcpt": "...", "data": "...",
   "eod": "552 5.3.4 Message too big", "drop_after_data": true, "idle_421_after": 0.5, "size": 2000}
(idle_421_after: seconds of silence after an answered message before the 421 and the close; size: the
SIZE its EHLO names, 10485760 if not given, none if null, and a message larger than it is answered with
aiosmtpd's bare "552 Error: Too much mail data")
A missing key is a well-behaved server's answer. Everything goes to OUTDIR:
  NNNN.eml          each message whose end of DATA was received (answered or not)
  events.log        one line per step: "CONNECT", "GREETING 554", "EOD 250", "DROPPED", "IDLE421"

Usage: scripted_smtp.py OUTDIR
"""
import json
import os
import socket
import sys
import threading

from fixture_lifetime import serve_connections

lock = threading.Lock()


def control(outdir):
    try:
        with open(os.path.join(outdir, "control.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def event(outdir, line):
    with lock:
        with open(os.path.join(outdir, "events.log"), "a") as f:
            f.write(line + "\n")


def save(outdir, message):
    with lock:
        count = len([n for n in os.listdir(outdir) if n.endswith(".eml")])
        path = os.path.join(outdir, "%04d.eml" % (count + 1))
        with open(path + ".tmp", "wb") as f:
            f.write(message)
        os.rename(path + ".tmp", path)


def handle(client, outdir):
    with client:
        reader = client.makefile("rb")

        def reply(text):
            client.sendall(text.encode() + b"\r\n")
            return text[:1] in ("2", "3")

        event(outdir, "CONNECT")
        greeting = control(outdir).get("greeting", "220 scripted.test ESMTP")
        event(outdir, "GREETING " + greeting[:3])
        if not reply(greeting):
            return
        idle_after_message = False
        while True:
            # Only between messages (after an answered end of DATA), as a server's idle timeout closes a
            # kept connection: never inside a session a slow client is still speaking.
            idle = control(outdir).get("idle_421_after") if idle_after_message else None
            idle_after_message = False
            client.settimeout(idle)
            try:
                line = reader.readline()
            except socket.timeout:
                event(outdir, "IDLE421")
                reply("421 4.4.2 scripted.test Error: timeout exceeded")
                return
            client.settimeout(None)
            if not line:
                return
            verb = line.split(b" ", 1)[0].split(b":", 1)[0].strip().upper()
            rules = control(outdir)
            if verb in (b"EHLO", b"HELO"):
                answer = rules.get("ehlo")
                if answer:
                    reply(answer)
                else:
                    size = rules.get("size", 10485760)
                    if size is None:
                        client.sendall(b"250-scripted.test\r\n250 8BITMIME\r\n")
                    else:
                        client.sendall(b"250-scripted.test\r\n250-8BITMIME\r\n250 SIZE %d\r\n" % int(size))
            elif verb == b"MAIL":
                reply(rules.get("mail", "250 2.1.0 Ok"))
            elif verb == b"RCPT":
                reply(rules.get("rcpt", "250 2.1.5 Ok"))
            elif verb == b"DATA":
                if not reply(rules.get("data", "354 End data with <CR><LF>.<CR><LF>")):
                    continue
                message = b""
                while True:
                    part = reader.readline()
                    if not part:
                        return
                    if part == b".\r\n":
                        break
                    message += part[1:] if part.startswith(b"..") else part
                save(outdir, message)
                rules = control(outdir)
                if rules.get("drop_after_data"):
                    event(outdir, "DROPPED")
                    client.shutdown(socket.SHUT_RDWR)
                    return
                too_much = len(message) > int(rules.get("size", 10485760) or 10485760)
                answer = rules.get("eod", "552 Error: Too much mail data" if too_much else "250 2.0.0 Ok: queued")
                event(outdir, "EOD " + answer[:3])
                reply(answer)
                idle_after_message = True
            elif verb == b"RSET" or verb == b"NOOP":
                reply("250 2.0.0 Ok")
            elif verb == b"QUIT":
                reply("221 2.0.0 Bye")
                return
            else:
                reply("502 5.5.2 Error: command not recognized")


def main():
    serve_connections(handle, sys.argv[1])


if __name__ == "__main__":
    main()
