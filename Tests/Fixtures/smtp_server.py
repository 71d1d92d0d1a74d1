#!/usr/bin/python3
"""A real SMTP server (Debian's python3-aiosmtpd) for Jotter's delivery tests.

Run with Debian's own /usr/bin/python3. It listens on 127.0.0.1, port 0 by default, and prints
the port it got on the first line of standard output. It exits when its standard input closes
(so it never outlives the test process) or on SIGTERM.

Modes:
  plain     no TLS offered at all (no STARTTLS in the EHLO answer)
  starttls  STARTTLS offered and required before MAIL (aiosmtpd's require_starttls)
  tls       implicit TLS from the first byte (the smtps:// port)

Everything lands in --outdir:
  NNNN.eml / NNNN.json        each accepted message: the raw bytes as received after DATA
                              (dot-unstuffed) and its envelope {mail_from, rcpt_tos, tls, login, helo}
  rejected/NNNN.eml           a message refused at the end of DATA (its bytes were received)
  events.log                  one line per MAIL / DATA received / refusal / AUTH / idle hang-up, e.g. "MAIL tls=1",
                              "TIMEOUT" (so a test can wait for the hang-up instead of sleeping)
  control.json                read at every MAIL, RCPT and end of DATA (the test may rewrite it):
                              {"mail": {"reply": "553 5.7.1 Sender rejected", "count": -1},
                               "rcpt": {"reply": "451 4.3.0 Try later", "count": 1},
                               "data": {"reply": "554 5.7.1 No", "count": -1}}
                              count N refuses the next N times, -1 refuses for ever.
Options --refuse-rcpt/--refuse-data REPLY with --refuse-count N seed control.json at start;
--require-fqdn-helo refuses RCPT after an EHLO name without a dot (Postfix's reject_non_fqdn_helo_hostname).
"""

import argparse
import asyncio
import json
import os
import ssl
import sys
import threading

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

from fixture_lifetime import exit_when_stdin_closes


class Recorder:
    """Writes what the server sees, and decides refusals from control.json."""

    def __init__(self, outdir, delay):
        self.outdir = outdir
        self.delay = delay
        self.rcpt_delay = 0
        self.require_fqdn_helo = False
        self.lock = threading.Lock()
        self.accepted = 0
        self.rejected = 0
        os.makedirs(os.path.join(outdir, "rejected"), exist_ok=True)

    def event(self, line):
        with self.lock:
            with open(os.path.join(self.outdir, "events.log"), "a") as f:
                f.write(line + "\n")

    def _write_atomically(self, path, data):
        temporary = path + ".tmp"
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(temporary, path)

    def refusal(self, stage):
        """The reply to refuse `stage` with, or None to accept (consuming one refusal if counted)."""
        path = os.path.join(self.outdir, "control.json")
        with self.lock:
            try:
                with open(path) as f:
                    control = json.load(f)
            except (FileNotFoundError, ValueError):
                return None
            rule = control.get(stage)
            if not rule or rule.get("count", -1) == 0:
                return None
            if rule.get("count", -1) > 0:
                rule["count"] -= 1
                self._write_atomically(path, json.dumps(control).encode())
            return rule["reply"]

    def store(self, envelope, tls, login, helo):
        with self.lock:
            self.accepted += 1
            name = "%04d" % self.accepted
        base = os.path.join(self.outdir, name)
        self._write_atomically(base + ".eml", envelope.content)
        meta = {"mail_from": envelope.mail_from, "rcpt_tos": envelope.rcpt_tos, "tls": tls, "login": login,
                "helo": helo}
        # The .json appears last: a test that sees it can read the .eml.
        self._write_atomically(base + ".json", json.dumps(meta).encode())
        return name

    def store_rejected(self, envelope):
        with self.lock:
            self.rejected += 1
            name = "%04d" % self.rejected
        self._write_atomically(os.path.join(self.outdir, "rejected", name + ".eml"), envelope.content)


def fqdn_or_literal(name):
    """Postfix's test for reject_non_fqdn_helo_hostname: an address literal, or a name with a dot."""
    name = name or ""
    if name.startswith("[") and name.endswith("]"):
        return True
    return "." in name.strip(".")


def is_tls(server):
    return server.transport is not None and server.transport.get_extra_info("ssl_object") is not None


def login_of(session):
    data = session.auth_data
    if isinstance(data, LoginPassword):
        return data.login.decode("utf-8", "replace")
    return data if isinstance(data, str) else None


class RecordingSMTP(SMTP):
    """aiosmtpd's SMTP, also recording when it hangs up on a connection left idle too long."""

    def __init__(self, recorder, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.jotter_recorder = recorder

    def _timeout_cb(self):
        super()._timeout_cb()
        # Recorded once the hang-up is on the wire: TLS writes its close_notify within close(), and a
        # plain socket is closed by a callback that close() has just queued ahead of this one.
        self.loop.call_soon(self.jotter_recorder.event, "TIMEOUT")


class Handler:
    def __init__(self, recorder):
        self.recorder = recorder

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        reply = self.recorder.refusal("mail")
        if reply:
            self.recorder.event("MAIL refused " + reply[:3])
            return reply
        self.recorder.event("MAIL tls=%d" % is_tls(server))
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if self.recorder.rcpt_delay:
            await asyncio.sleep(self.recorder.rcpt_delay)
        if self.recorder.require_fqdn_helo and not fqdn_or_literal(session.host_name):
            # What Postfix's reject_non_fqdn_helo_hostname answers (at RCPT: smtpd_delay_reject).
            self.recorder.event("RCPT refused 504 helo")
            return "504 5.5.2 <%s>: Helo command rejected: need fully-qualified hostname" % session.host_name
        reply = self.recorder.refusal("rcpt")
        if reply:
            self.recorder.event("RCPT refused " + reply[:3])
            return reply
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.recorder.event("DATA received")  # the whole message is here; its reply may wait (--delay-ms)
        if self.recorder.delay:
            await asyncio.sleep(self.recorder.delay)
        reply = self.recorder.refusal("data")
        if reply:
            self.recorder.store_rejected(envelope)
            self.recorder.event("DATA refused " + reply[:3])
            return reply
        name = self.recorder.store(envelope, is_tls(server), login_of(session), session.host_name)
        self.recorder.event("DATA accepted " + name)
        return "250 OK queued as " + name


class Authenticator:
    def __init__(self, user, password, recorder):
        self.user = user.encode()
        self.password = password.encode()
        self.recorder = recorder

    def __call__(self, server, session, envelope, mechanism, auth_data):
        ok = (isinstance(auth_data, LoginPassword)
              and auth_data.login == self.user and auth_data.password == self.password)
        self.recorder.event("AUTH %s %s" % (mechanism, "ok" if ok else "refused"))
        # handled=False: aiosmtpd itself answers 235 or 535.
        return AuthResult(success=ok, handled=False, auth_data=auth_data)



async def serve(args):
    loop = asyncio.get_running_loop()
    recorder = Recorder(args.outdir, args.delay_ms / 1000)
    recorder.rcpt_delay = args.rcpt_delay_ms / 1000
    recorder.require_fqdn_helo = args.require_fqdn_helo
    if args.refuse_rcpt or args.refuse_data:
        control = {}
        if args.refuse_rcpt:
            control["rcpt"] = {"reply": args.refuse_rcpt, "count": args.refuse_count}
        if args.refuse_data:
            control["data"] = {"reply": args.refuse_data, "count": args.refuse_count}
        recorder._write_atomically(os.path.join(args.outdir, "control.json"), json.dumps(control).encode())
    context = None
    if args.mode != "plain":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)
    options = {"hostname": "smtp.jotter.test", "decode_data": False, "timeout": args.idle_timeout}
    if args.mode == "starttls":
        options.update(tls_context=context, require_starttls=True)
    if args.auth:
        user, _, password = args.auth.partition(":")
        # Implicit TLS is TLS from the first byte; aiosmtpd only counts STARTTLS as TLS for AUTH.
        options.update(authenticator=Authenticator(user, password, recorder),
                       auth_require_tls=args.mode != "tls")
    handler = Handler(recorder)
    server = await loop.create_server(
        lambda: RecordingSMTP(recorder, handler, loop=loop, **options),
        host="127.0.0.1", port=args.port, ssl=context if args.mode == "tls" else None)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["plain", "starttls", "tls"], default="plain")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--outdir", required=True)
    parser.add_argument("--auth", help="USER:PASSWORD to require (AUTH only after TLS)")
    parser.add_argument("--delay-ms", type=int, default=0, help="wait this long before answering DATA")
    parser.add_argument("--rcpt-delay-ms", type=int, default=0, help="wait this long before answering RCPT")
    parser.add_argument("--idle-timeout", type=float, default=300, help="close a connection idle this long (s)")
    parser.add_argument("--refuse-rcpt", help="reply to RCPT with this, e.g. '451 4.3.0 Try later'")
    parser.add_argument("--refuse-data", help="reply to the end of DATA with this")
    parser.add_argument("--require-fqdn-helo", action="store_true",
                        help="refuse RCPT after an EHLO that is neither a dotted name nor an address literal")
    parser.add_argument("--refuse-count", type=int, default=1, help="how many times (-1: always)")
    args = parser.parse_args()
    if args.mode != "plain" and not (args.cert and args.key):
        parser.error("--cert and --key are needed for TLS")
    exit_when_stdin_closes()
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
