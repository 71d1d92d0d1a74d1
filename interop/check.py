#!/usr/bin/python3
"""interop/check.py: the checks of interop/run, against the Postfix and Dovecot it configured.

Starts `jotter serve` on 127.0.0.1 with each relay in turn, posts memos with curl, waits (polling
/history against a deadline) until they are delivered or held, then reads the user's mailbox back over
IMAP (imaplib, STARTTLS, the throwaway CA) and with notmuch, compares every subject and body exactly
(Python's email package decodes), counts every memo exactly once, and prints a table. Exit status 1
when any check failed. Everything talks to 127.0.0.1 only.
"""
import argparse, datetime, email, email.policy, imaplib, json, os, re, signal, smtplib, ssl
import subprocess, sys, tempfile, time, urllib.parse, urllib.request

EMOJI30 = "".join(chr(0x1F600 + i) for i in range(30))  # 😀 … 😝, thirty emoji of one code point each
DELIVERY_DEADLINE = 180  # seconds for a batch of memos to reach `sent`
results = []  # (check, passed, detail)


def check(name, passed, detail=""):
    results.append((name, bool(passed), detail))
    print(f"    {'PASS' if passed else 'FAIL'}  {name}: {detail}", file=sys.stderr, flush=True)
    return passed


def normalized(text):
    """A memo's text as Jotter stores it: CRLF and lone CR become LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def derived_subject(body):
    """Jotter's subject for a memo sent without one: its first non-blank line (short ones only here)."""
    line = next(l.strip(" \t") for l in normalized(body).split("\n") if l.strip(" \t"))
    assert len(line) <= 60, "keep derived subjects short: the cut at a word is not modelled here"
    return line


# --- the memos ---------------------------------------------------------------------------------------

def memo_set(tag):
    """The memos each relay gets: (label, how it is posted, subject given or None, body)."""
    long_lines = "".join(f"{n:04d} The quick brown fox jumps over the lazy dog — ünïcödé ✓ {tag}\n"
                         for n in range(2000))
    memos = [
        ("plain text", "raw", None, "buy milk\nand eggs"),
        ("30-emoji subject", "json", EMOJI30, f"Thirty emoji in the subject: {EMOJI30}\nsecond line"),
        ("long body (~130 KB, 5,000-char line)", "json", "Long body: 2,000 lines and one of 5,000 characters",
         long_lines[:len(long_lines) // 2] + "." + "\n" + "x" * 5000 + "\n" + long_lines[len(long_lines) // 2:]),
        ("CRLF, lone dots, From lines", "raw", None,
         "Dots and CRLF\r\n.\r\n..\r\n. \r\n.leading dot\r\nFrom the start of a line\r\n>From quoted\r\n"
         "trailing spaces   \r\n\ttab first\r\nlone CR\rhere\r\n\r\n\r\nend after blank lines"),
        ("Unicode subject and text (folded)", "json",
         "日本語の件名：長いテキストが折り返されても正しく復元されることを確かめる — Ünïcödé ελληνικά العربية",
         "Ça marche: naïve café, e\u0301 (NFD), Straße, ŁÓDŹ\n"
         "Русский текст, ελληνικά, עברית, العربية (RTL)\n"
         "emoji with joiners: 👨\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈 👍🏽, flags 🇯🇵🇫🇷\n"
         "no-break\u00a0space, zero\u200bwidth, math 𝔸𝕓𝒸 ∑∫√, CJK 漢字かなカナ 한국어"),
        ("mostly non-ASCII body (base64)", "json", "吾輩は猫である",
         "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。\n" * 40),
        ("form: '=?' in the subject", "form", "Subject with =?UTF-8?B?SGk=?= that is not an encoded word",
         "form body with & = + % ; characters\nsecond line"),
        ("multipart upload from a file", "multipart", "Multipart upload",
         "uploaded from a file\nline 2 — ✓\n"),
        ("long ASCII subject (folded)", "json",
         "A plain ASCII subject that is long enough to need folding across more than one header line, "
         "as mail clients write them",
         "short body"),
        ("one 1,200-character ASCII line", "raw", None, "Very long line follows\n" + "y" * 1200),
    ]
    return [(label, kind, subject, body + f"\n-- interop {tag} #{index}")
            for index, (label, kind, subject, body) in enumerate(memos, 1)]


class Memo:
    def __init__(self, phase, label, kind, subject, body):
        self.phase, self.label, self.kind, self.given_subject, self.body = phase, label, kind, subject, body
        self.expected_subject = subject if subject is not None else derived_subject(body)
        self.expected_body = normalized(body) + "\n"  # a message's text ends with a line break
        self.id = None
        self.may_repeat = False  # set for a memo whose SMTP delivery was interrupted by kill -9


# --- Jotter --------------------------------------------------------------------------------------------

class Jotter:
    def __init__(self, binary, data_dir, relay, work, name, slots=None):
        self.binary, self.data_dir, self.relay, self.work, self.name = binary, data_dir, relay, work, name
        self.slots = slots
        self.process = None

    def start(self):
        relay_file = os.path.join(self.work, f"relay-{self.name}")
        with open(os.open(relay_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(self.relay + "\n")
        environment = {k: v for k, v in os.environ.items()
                       if k not in ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "INTEROP_PASSWORD", "JOTTER_RELAY")}
        arguments = [self.binary, "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", self.data_dir,
                     "--relay-file", relay_file, "--rate-limit", "off", "--log-level", "info"]
        if self.slots:
            arguments += ["--slots", str(self.slots)]
        self.stdout = open(os.path.join(self.work, "log", f"jotter-{self.name}.out"), "a")
        self.stderr = open(os.path.join(self.work, "log", f"jotter-{self.name}.err"), "a")
        self.process = subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                        env=environment)
        first = self.process.stdout.readline()
        second = self.process.stdout.readline()
        self.stdout.write(first + second)
        self.stdout.flush()
        match = re.match(r"Listening on http://127\.0\.0\.1:(\d+)", first)
        if not match:
            raise RuntimeError(f"jotter did not start ({self.name}): {first!r}; see {self.stderr.name}")
        self.port = int(match.group(1))
        self.destination = second.strip()
        return self

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path):
        with urllib.request.urlopen(self.url(path), timeout=10) as response:
            return json.load(response)

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill9(self):
        self.process.kill()  # SIGKILL
        self.process.wait()
        self.process = None


def post_all(jotter, memos, work):
    """POSTs each memo with curl, one transfer per memo in one curl process (--next); records the ids."""
    folder = tempfile.mkdtemp(dir=work, prefix="post-")
    arguments = ["curl", "--silent", "--show-error", "--noproxy", "*"]
    for index, memo in enumerate(memos):
        if index:
            arguments.append("--next")
        body_file = os.path.join(folder, f"{index}.body")
        headers_file = os.path.join(folder, f"{index}.headers")
        arguments += ["--dump-header", headers_file, "--output", "/dev/null"]
        if memo.kind == "raw":
            with open(body_file, "wb") as f:
                f.write(memo.body.encode())
            arguments += ["-H", "Content-Type: text/plain; charset=utf-8", "--data-binary", "@" + body_file]
        elif memo.kind == "json":
            with open(body_file, "wb") as f:
                f.write(json.dumps({"subject": memo.given_subject, "body": memo.body},
                                   ensure_ascii=False).encode())
            arguments += ["-H", "Content-Type: application/json", "--data-binary", "@" + body_file]
        elif memo.kind == "form":
            subject_file = body_file + ".subject"
            with open(subject_file, "wb") as f:
                f.write(memo.given_subject.encode())
            with open(body_file, "wb") as f:
                f.write(memo.body.encode())
            arguments += ["--data-urlencode", "subject@" + subject_file, "--data-urlencode", "body@" + body_file]
        elif memo.kind == "multipart":
            with open(body_file, "wb") as f:
                f.write(memo.body.encode())
            arguments += ["-F", "subject=" + memo.given_subject, "-F", f"body=@{body_file};type=text/plain"]
        arguments.append(jotter.url("/send"))
    subprocess.run(arguments, check=True, timeout=120)
    accepted = 0
    for index, memo in enumerate(memos):
        with open(os.path.join(folder, f"{index}.headers"), "rb") as f:
            head = f.read().decode("latin-1")
        status = re.match(r"HTTP/1\.1 (\d+)", head)
        found = re.search(r"(?im)^X-Message-Id:\s*([0-9a-f-]{36})\s*$", head)
        if status and status.group(1) == "204" and found:
            memo.id = found.group(1).lower()
            accepted += 1
    return accepted


def statuses(jotter):
    return {record["id"]: record for record in jotter.get("/history?limit=500")}


def wait_until(jotter, memos, done, deadline_seconds=DELIVERY_DEADLINE):
    """Polls /history until done(record) holds for every memo, or the deadline passes. Returns the records."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        records = statuses(jotter)
        if all(m.id in records and done(records[m.id]) for m in memos):
            return records, True
        if time.monotonic() > deadline:
            return records, False
        time.sleep(0.05)


def summary(records, memos):
    counts = {}
    for memo in memos:
        status = records.get(memo.id, {}).get("status", "missing")
        counts[status] = counts.get(status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


# --- the mail system's logs ----------------------------------------------------------------------------

def log_count(path, pattern):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return len(re.findall(pattern, f.read()))
    except FileNotFoundError:
        return 0


class Logs:
    def __init__(self, args):
        self.args = args

    def auth_failures(self):
        return (log_count(self.args.postfix_log, r"SASL \S+ authentication failed"),
                log_count(self.args.dovecot_log, r"(?i)password mismatch|auth failed|unknown user"))

    def logins(self):
        return log_count(self.args.postfix_log, r"sasl_method=")


# --- the phases ----------------------------------------------------------------------------------------

def smtp_relay(args, scheme, port, password, ca=True):
    user = urllib.parse.quote(args.user, safe="")
    secret = urllib.parse.quote(password, safe="")
    query = {"to": f"{args.user}@localhost", "from": "Jotter Interop <jotter@localhost>"}
    if ca:
        query["ca"] = args.ca
    return f"{scheme}://{user}:{secret}@127.0.0.1:{port}?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)


def check_server_setup(args, password):
    """The mail system is what the issue asks for: STARTTLS before AUTH on submission, implicit TLS on smtps."""
    context = ssl.create_default_context(cafile=args.ca)
    with smtplib.SMTP("127.0.0.1", args.submission_port, timeout=30) as smtp:
        smtp.ehlo("interop.localhost")
        before = smtp.has_extn("auth"), smtp.has_extn("starttls")
        mail_before_tls, _ = smtp.docmd("MAIL", "FROM:<probe@localhost>")
        smtp.docmd("RSET")
        smtp.starttls(context=context)
        smtp.ehlo("interop.localhost")
        after = smtp.has_extn("auth"), smtp.esmtp_features.get("auth", "")
        code, _ = smtp.docmd("MAIL", "FROM:<probe@localhost>")
        code_rcpt = None
        if code == 250:
            code_rcpt, _ = smtp.docmd("RCPT", f"TO:<{args.user}@localhost>")
        smtp.docmd("RSET")
    check("Postfix submission: STARTTLS required, AUTH only after it",
          before == (False, True) and mail_before_tls >= 500 and after[0] and (code_rcpt is None or code_rcpt >= 500),
          f"127.0.0.1:{args.submission_port}; before STARTTLS: AUTH offered={before[0]}, MAIL → {mail_before_tls}; "
          f"after: AUTH {after[1].strip()}, unauthenticated mail refused")
    with smtplib.SMTP_SSL("127.0.0.1", args.smtps_port, timeout=30, context=context) as smtp:
        smtp.ehlo("interop.localhost")
        version = smtp.sock.version()
        has_auth = smtp.has_extn("auth")
    check("Postfix smtps: implicit TLS with the throwaway CA, AUTH offered", has_auth and version,
          f"127.0.0.1:{args.smtps_port}, {version}")
    imap = imaplib.IMAP4("127.0.0.1", args.imap_port)
    imap.starttls(ssl_context=context)
    status, _ = imap.login(args.user, password)
    imap.logout()
    check("Dovecot IMAP: STARTTLS with the throwaway CA, login as the test user", status == "OK",
          f"127.0.0.1:{args.imap_port}, user {args.user}")


def check_loopback_only(args):
    """Postfix and Dovecot listen on 127.0.0.1 only, on the three ports of the run and nowhere else."""
    output = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    listening = set()
    for line in output.splitlines():
        if re.search(r'users:\(\("(master|dovecot|imap-login|smtpd)"', line):
            listening.add(line.split()[3])
    wanted = {f"127.0.0.1:{p}" for p in (args.submission_port, args.smtps_port, args.imap_port)}
    check("Postfix and Dovecot listen on 127.0.0.1 only", listening == wanted,
          f"listening: {', '.join(sorted(listening)) or 'nothing'}")


def deliver_phase(args, name, relay, memos, note):
    """One relay: start Jotter, post every memo, wait until all are sent."""
    jotter = Jotter(args.jotter, os.path.join(args.work, f"data-{name}"), relay, args.work, name).start()
    try:
        started = time.monotonic()
        accepted = post_all(jotter, memos, args.work)
        records, ok = wait_until(jotter, memos, lambda r: r["status"] == "sent")
        seconds = time.monotonic() - started
        attempts = sum(records.get(m.id, {}).get("attempts", 0) for m in memos)
        check(f"{note}: memos accepted and sent", accepted == len(memos) and ok,
              f"{accepted}/{len(memos)} accepted (204), {summary(records, memos)} in {seconds:.1f} s, "
              f"{attempts} attempts; {jotter.destination}")
    finally:
        jotter.stop()


def breaker_phase(args, logs, password, memos, late_memo):
    """A wrong password: one failed login while memos are held; the right one releases them."""
    name = "breaker"
    data = os.path.join(args.work, f"data-{name}")
    failures_before = logs.auth_failures()
    wrong = Jotter(args.jotter, data, smtp_relay(args, "smtp", args.submission_port, password + "-wrong"),
                   args.work, name).start()
    try:
        accepted = post_all(wrong, memos, args.work)
        records, ok = wait_until(wrong, memos, lambda r: r["status"] == "held", 120)
        health = wrong.get("/healthz")
        reasons = {records.get(m.id, {}).get("last_error") for m in memos}
        waiting = {records.get(m.id, {}).get("waiting_for") for m in memos}
        check("Wrong password: every memo held, relay refused",
              accepted == len(memos) and ok and reasons == {"auth"} and waiting == {"relay_refused"},
              f"{summary(records, memos)}; last_error {sorted(map(str, reasons))}, "
              f"waiting_for {sorted(map(str, waiting))}")
        relay = health.get("relay", {})
        check("Wrong password: /healthz says so", health.get("status") == "degraded"
              and relay.get("state") == "refused" and relay.get("reason") == "auth"
              and health.get("outbox", {}).get("held") == len(memos),
              f"status {health.get('status')}, relay {relay.get('state')}/{relay.get('reason')}, "
              f"held {health.get('outbox', {}).get('held')}")
        # A memo that arrives while the relay refuses waits with the others, costing no login.
        post_all(wrong, [late_memo], args.work)
        late_records, late_ok = wait_until(wrong, [late_memo], lambda r: r["status"] == "held", 30)
        # Watch a while for a second attempt (there should be none until the 15-minute re-test).
        watch_until = time.monotonic() + 5
        while time.monotonic() < watch_until:
            if wrong.process.poll() is not None:
                break
            time.sleep(0.25)
        postfix_failures, dovecot_failures = (a - b for a, b in zip(logs.auth_failures(), failures_before))
        check("Wrong password: one failed login for all of them",
              postfix_failures == 1 and dovecot_failures == 1 and late_ok,
              f"{len(memos) + 1} memos held, failed logins: Postfix {postfix_failures}, Dovecot {dovecot_failures} "
              f"(watched 5 s after a late memo was held)")
    finally:
        wrong.stop()
    all_memos = memos + [late_memo]
    right = Jotter(args.jotter, data, smtp_relay(args, "smtp", args.submission_port, password),
                   args.work, name).start()
    try:
        records, ok = wait_until(right, all_memos, lambda r: r["status"] == "sent")
        postfix_failures, _ = (a - b for a, b in zip(logs.auth_failures(), failures_before))
        check("Right password: held memos released and sent", ok and postfix_failures == 1,
              f"{summary(records, all_memos)} after the restart with the new relay URL; no further failed login")
    finally:
        right.stop()


def tls_phase(args, logs, password, memos):
    """A certificate the system's bundle cannot verify: held as `tls`, the password never sent."""
    name = "tls"
    data = os.path.join(args.work, f"data-{name}")
    logins_before = logs.logins()
    failures_before = logs.auth_failures()
    bad = Jotter(args.jotter, data, smtp_relay(args, "smtps", args.smtps_port, password, ca=False),
                 args.work, name).start()
    try:
        accepted = post_all(bad, memos, args.work)
        records, ok = wait_until(bad, memos, lambda r: r["status"] == "held", 120)
        reasons = {records.get(m.id, {}).get("last_error") for m in memos}
        health = bad.get("/healthz").get("relay", {})
        logins = logs.logins() - logins_before
        failures = logs.auth_failures()[0] - failures_before[0]
        check("Unverifiable certificate (no ?ca=): held, no login attempted",
              accepted == len(memos) and ok and reasons == {"tls"} and health.get("reason") == "tls"
              and logins == 0 and failures == 0,
              f"{summary(records, memos)}, last_error {sorted(map(str, reasons))}, relay "
              f"{health.get('state')}/{health.get('reason')}, logins {logins}, failed logins {failures}")
    finally:
        bad.stop()
    good = Jotter(args.jotter, data, smtp_relay(args, "smtps", args.smtps_port, password), args.work, name).start()
    try:
        records, ok = wait_until(good, memos, lambda r: r["status"] == "sent")
        check("With ?ca=: the held memos are sent", ok, summary(records, memos))
    finally:
        good.stop()


def kill_phase(args, password, memos):
    """kill -9 while memos are being delivered, restart, and every memo arrives (exactly once: checked later)."""
    name = "kill9"
    data = os.path.join(args.work, f"data-{name}")
    relay = smtp_relay(args, "smtp", args.submission_port, password)
    first = Jotter(args.jotter, data, relay, args.work, name, slots=1).start()
    killed_with = None
    try:
        accepted = post_all(first, memos, args.work)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            records = statuses(first)
            sent = sum(1 for m in memos if records.get(m.id, {}).get("status") == "sent")
            sending = sum(1 for m in memos if records.get(m.id, {}).get("status") == "sending")
            if sent >= 3 and sending:  # one is in the middle of its SMTP transaction: kill now
                first.kill9()
                killed_with = sent
                break
            time.sleep(0.002)
    finally:
        if first.process:
            first.stop()
    second = Jotter(args.jotter, data, relay, args.work, name, slots=1).start()
    try:
        records, ok = wait_until(second, memos, lambda r: r["status"] == "sent")
        for memo in memos:
            memo.may_repeat = records.get(memo.id, {}).get("attempts", 0) >= 2
        with open(second.stderr.name, encoding="utf-8", errors="replace") as f:
            requeued = re.findall(r"re-queued interrupted deliveries count=(\d+)", f.read())
        check("kill -9 mid-delivery, restart: all sent",
              accepted == len(memos) and ok and killed_with is not None and killed_with < len(memos),
              f"killed with {killed_with}/{len(memos)} sent, re-queued at restart: "
              f"{requeued[-1] if requeued else 0}; then {summary(records, memos)}")
    finally:
        second.stop()


# --- reading back --------------------------------------------------------------------------------------

def read_imap(args, password):
    context = ssl.create_default_context(cafile=args.ca)
    imap = imaplib.IMAP4("127.0.0.1", args.imap_port)
    imap.starttls(ssl_context=context)
    imap.login(args.user, password)
    imap.select("INBOX", readonly=True)
    _, data = imap.uid("SEARCH", None, "ALL")
    messages = []
    for uid in data[0].split():
        _, parts = imap.uid("FETCH", uid, "(BODY.PEEK[])")
        raw = next(part[1] for part in parts if isinstance(part, tuple))
        messages.append(email.message_from_bytes(raw, policy=email.policy.default))
    imap.logout()
    return messages


def compare(messages_by_id, memos, reader):
    """Per memo: how many copies, and whether every copy's subject and body are exact.

    A memo may arrive twice only where DESIGN.md ("Power loss and crashes") allows it: it was being sent
    when Jotter was killed (so its delivery took a second attempt) and the relay is SMTP, which has no
    idempotency key; then both copies must carry the same Message-ID (they are looked up by it here).
    """
    missing, duplicated, repeated, wrong_subject, wrong_body = [], [], [], [], []
    for memo in memos:
        copies = messages_by_id.get(memo.id, [])
        if not copies:
            missing.append(memo)
            continue
        if len(copies) > 1:
            (repeated if memo.may_repeat and len(copies) == 2 else duplicated).append(memo)
        for subject, body in copies:
            if subject != memo.expected_subject:
                wrong_subject.append((memo, subject))
                break
        for subject, body in copies:
            if normalized(body) != memo.expected_body:
                wrong_body.append((memo, body))
                break
    for memo, subject in wrong_subject[:5]:
        print(f"    {reader}: {memo.phase} '{memo.label}': subject {subject!r}, expected "
              f"{memo.expected_subject!r}", file=sys.stderr)
    for memo, body in wrong_body[:5]:
        got, want = normalized(body), memo.expected_body
        at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        print(f"    {reader}: {memo.phase} '{memo.label}': body differs at {at}: {got[at - 20:at + 40]!r} "
              f"vs {want[at - 20:at + 40]!r} (lengths {len(got)}, {len(want)})", file=sys.stderr)
    return missing, duplicated, repeated, wrong_subject, wrong_body


def describe(items):
    return "; ".join(f"{m.phase}/{m.label}" for m in (i[0] if isinstance(i, tuple) else i for i in items[:3]))


def message_key(message_id):
    found = re.fullmatch(r"<?([0-9a-f-]{36})@[^>]+>?", (message_id or "").strip())
    return found.group(1) if found else message_id


def imap_checks(args, password, memos, by_phase):
    messages = read_imap(args, password)
    by_id, by_tag = {}, {}
    for message in messages:
        key = message_key(message["message-id"])
        body = message.get_content()
        by_id.setdefault(key, []).append((str(message["subject"]), body))
        tag = re.search(r"-- interop \S+ #\d+|kill -9 memo \d+", body)
        by_tag.setdefault(tag.group(0) if tag else None, set()).add(key)
    missing, duplicated, repeated, wrong_subject, wrong_body = compare(by_id, memos, "IMAP")
    extra = [k for k in by_id if k not in {m.id for m in memos}]
    # Counted by content too: each memo's tag line is in exactly one Message-ID.
    tags_once = None not in by_tag and all(len(keys) == 1 for keys in by_tag.values()) \
        and len(by_tag) == len(memos)
    check("IMAP: every memo exactly once, nothing else",
          not missing and not duplicated and not extra and tags_once
          and len(messages) == len(memos) + len(repeated),
          f"{len(messages)} messages for {len(memos)} memos ({by_phase}); by Message-ID and by content: "
          f"missing {len(missing)}, duplicated {len(duplicated)}{' ' + describe(duplicated) if duplicated else ''}, "
          f"other {len(extra)}" + (f", plus kill -9's repeat (next row)" if repeated else ""))
    in_flight = [m for m in memos if m.may_repeat]
    check("kill -9: the memo in flight at the kill at most twice, one Message-ID",
          not [m for m in repeated if m.phase != "kill9"] and len(repeated) <= len(in_flight) <= 1,
          f"{len(in_flight)} in flight (second attempt after the restart); arrived twice: {len(repeated)}"
          + (" (Postfix had queued it before the kill, Jotter had not recorded it: the SMTP repeat DESIGN.md allows)"
             if repeated else ""))
    check("IMAP: subjects exact (RFC 2047 decoded)", not wrong_subject and not missing,
          f"{len(memos) - len(missing) - len(wrong_subject)}/{len(memos)} equal {describe(wrong_subject)}")
    check("IMAP: bodies exact", not wrong_body and not missing,
          f"{len(memos) - len(missing) - len(wrong_body)}/{len(memos)} equal {describe(wrong_body)}")
    # The SMTP relays authenticated over TLS: Postfix's Received header says ESMTPSA and the TLS version.
    smtp_ids = {m.id for m in memos if m.phase in ("smtp", "smtps", "breaker", "tls", "kill9")}
    tls_auth = set()
    for message in messages:
        key = message_key(message["message-id"])
        if key in smtp_ids:
            received = " ".join(str(h) for h in message.get_all("received", []))
            if "ESMTPSA" in received and re.search(r"using TLSv1\.[23]", received):
                tls_auth.add(key)
    encodings = sorted({m.get("content-transfer-encoding", "").lower() for m in messages})
    check("Received headers: SMTP memos came over TLS, authenticated", len(tls_auth) == len(smtp_ids),
          f"{len(tls_auth)}/{len(smtp_ids)} with ESMTPSA and TLSv1.2+; transfer encodings seen: {', '.join(encodings)}")


def notmuch_checks(args, memos):
    config = os.path.join(args.work, "notmuch-config")
    database = os.path.join(args.work, "notmuch-db")
    os.makedirs(database, exist_ok=True)
    with open(config, "w") as f:
        f.write(f"[database]\npath={database}\nmail_root={args.maildir}\n"
                "[new]\ntags=inbox;\nignore=\n[search]\nexclude_tags=\n[maildir]\nsynchronize_flags=false\n")
    environment = dict(os.environ, NOTMUCH_CONFIG=config)
    run = lambda *a: subprocess.run(["notmuch", *a], env=environment, capture_output=True, check=True,
                                    timeout=300).stdout
    run("new", "--quiet")
    count = int(run("count", "--output=messages", "*").decode().strip())
    threads = json.loads(run("show", "--format=json", "--entire-thread=false", "--include-html", "*"))
    by_id = {}

    def walk(node):
        if isinstance(node, dict) and "headers" in node:
            found = re.fullmatch(r"([0-9a-f-]{36})@.+", node.get("id", ""))
            parts = [p for p in node.get("body", []) if p.get("content-type") == "text/plain"]
            body = parts[0].get("content", "") if parts else ""
            filenames = node.get("filename", [])
            # notmuch keeps one message per Message-ID, with a file name for each copy.
            for _ in (filenames if isinstance(filenames, list) else [filenames]):
                by_id.setdefault(found.group(1) if found else node.get("id"), []).append(
                    (node["headers"].get("Subject", ""), body))
        elif isinstance(node, list):
            for item in node:
                walk(item)
    walk(threads)
    missing, duplicated, repeated, wrong_subject, wrong_body = compare(by_id, memos, "notmuch")
    files = sum(len(copies) for copies in by_id.values())
    check("notmuch new: indexes every message once", count == len(memos) and not missing and not duplicated,
          f"{count} messages indexed for {len(memos)} memos, {files} files"
          + (f" ({len(repeated)} kill -9 repeat: one message, two files)" if repeated else ""))
    check("notmuch show --format=json: subjects and bodies exact", not wrong_subject and not wrong_body,
          f"subjects {len(memos) - len(wrong_subject) - len(missing)}/{len(memos)}, "
          f"bodies {len(memos) - len(wrong_body) - len(missing)}/{len(memos)} {describe(wrong_subject + wrong_body)}")
    emoji = [m for m in memos if m.expected_subject == EMOJI30]
    complete = 0
    for memo in emoji:
        found = json.loads(run("search", "--format=json", "--output=summary", f"id:{memo.id}@localhost"))
        subject = found[0]["subject"] if found else ""
        complete += subject == EMOJI30 and len(subject) == 30
    check("notmuch search: the 30-emoji subject shows all 30", complete == len(emoji) and emoji,
          f"{complete}/{len(emoji)} subjects of 30 emoji, none cut or left encoded")


def secrets_check(args, password):
    leaked = []
    for name in sorted(os.listdir(os.path.join(args.work, "log"))):
        if name.startswith("jotter-"):
            with open(os.path.join(args.work, "log", name), "rb") as f:
                text = f.read()
            if password.encode() in text or urllib.parse.quote(password, safe="").encode() in text:
                leaked.append(name)
    check("The relay password appears in no Jotter output", not leaked,
          f"{len([n for n in os.listdir(os.path.join(args.work, 'log')) if n.startswith('jotter-')])} "
          f"stdout/stderr files read" + (f"; found in {', '.join(leaked)}" if leaked else ""))


def main():
    parser = argparse.ArgumentParser()
    for option in ("jotter", "work", "user", "maildir", "ca", "postfix-log", "dovecot-log"):
        parser.add_argument("--" + option, required=True)
    for option in ("submission-port", "smtps-port", "imap-port"):
        parser.add_argument("--" + option, type=int, required=True)
    args = parser.parse_args()
    password = os.environ["INTEROP_PASSWORD"]
    logs = Logs(args)
    versions = {
        "Postfix": subprocess.run(["postconf", "-h", "mail_version"], capture_output=True, text=True).stdout.strip(),
        "Dovecot": subprocess.run(["dovecot", "--version"], capture_output=True, text=True).stdout.split()[0],
        "notmuch": subprocess.run(["notmuch", "--version"], capture_output=True, text=True).stdout.split()[-1],
        "curl": subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.split()[1],
    }
    all_memos = []
    counts = {}

    def memos_for(phase, definitions):
        memos = [Memo(phase, *definition) for definition in definitions]
        all_memos.extend(memos)
        counts[phase] = len(memos)
        return memos

    try:
        check_loopback_only(args)
        check_server_setup(args, password)
        deliver_phase(args, "smtp", smtp_relay(args, "smtp", args.submission_port, password),
                      memos_for("smtp", memo_set("smtp")), "smtp:// (STARTTLS, AUTH)")
        deliver_phase(args, "smtps", smtp_relay(args, "smtps", args.smtps_port, password),
                      memos_for("smtps", memo_set("smtps")), "smtps:// (implicit TLS, AUTH)")
        deliver_phase(args, "sendmail", f"sendmail:?to={args.user}@localhost&from=jotter@localhost",
                      memos_for("sendmail", memo_set("sendmail")), "sendmail: (Postfix's sendmail -t -i)")
        breaker = memos_for("breaker", [(f"held memo {n}", "raw", None, f"held memo {n}\n-- interop breaker #{n}")
                                        for n in range(1, 7)])
        breaker_phase(args, logs, password, breaker[:-1], breaker[-1])
        tls = memos_for("tls", [(f"tls memo {n}", "raw", None, f"tls memo {n}\n-- interop tls #{n}")
                                for n in range(1, 3)])
        tls_phase(args, logs, password, tls)
        kill = memos_for("kill9", [(f"kill -9 memo {n}", "raw", None, f"kill -9 memo {n}\n" + "z" * 2000)
                                   for n in range(1, 41)])
        kill_phase(args, password, kill)
        by_phase = ", ".join(f"{phase} {n}" for phase, n in counts.items())
        imap_checks(args, password, all_memos, by_phase)
        notmuch_checks(args, all_memos)
        secrets_check(args, password)
    except Exception as error:  # a check that could not run is a failure, with its reason
        import traceback
        traceback.print_exc()
        check("the run itself", False, f"{type(error).__name__}: {error}")

    failed = sum(1 for _, passed, _ in results if not passed)
    width = max(len(name) for name, _, _ in results)
    print()
    print(f"Jotter interop, {datetime.date.today().isoformat()}: Postfix {versions['Postfix']}, "
          f"Dovecot {versions['Dovecot']}, notmuch {versions['notmuch']}, curl {versions['curl']}; "
          f"all on 127.0.0.1")
    print(f"{'#':>2}  {'check':<{width}}  result  detail")
    for number, (name, passed, detail) in enumerate(results, 1):
        print(f"{number:>2}  {name:<{width}}  {'PASS' if passed else 'FAIL':<6}  {detail}")
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
