#!/usr/bin/python3
"""Drives Jotter's page in headless Chromium and prints what it observed, as one JSON object.

    /usr/bin/python3 Tests/Browser/page_test.py --url http://127.0.0.1:PORT --scenario NAME [--maildir PATH]

The driver observes; it does not judge: it exits 0 whenever it could run (also when an observation
is bad) and the Swift suite (Tests/JotterTests/BrowserTests.swift) asserts. If the scenario itself
broke (an element missing, a timeout), "error" says why and the other fields hold what was seen.

Every scenario also reports
  requests          every request the page made (url, method, type, status), from the Network domain
  foreign_requests  those not to the page's own origin (about:, data: and blob: URLs excepted)
  problems          console errors, uncaught exceptions and error log entries (failed loads, CSP)
  maildir           with --maildir: the delivered messages' subjects and bodies (Python's email package)

Scenarios:
  send      type a memo, Ctrl+Enter: state right after the keydown (same task), the POST, the outbox
  subject   memo, then a subject, Ctrl+Enter in the subject field: the focus must come back to the memo
  button    type a memo, click Send with the mouse
  restart   the server goes away and comes back on the same origin; needs the caller's help: the
            driver prints {"await": "stop-server"} and {"await": "start-server"} lines and waits for a
            line on stdin after each. The observations object is the last line.
  language  subject + memo typed, #lang switched to ja with the mouse and keyboard, as a user does
  rtl       ?lang=ar: direction and the mirrored positions of the send button and subject field
  privacy   the tab is hidden (another tab in front), then shown again
  nojs      script execution disabled: type, click Send, the form posts, 303 brings back an empty page
  undo      the server holds memos for an undo window: send, press Undo, the text comes back
  undo_superseded  Undo retires when the next memo is sent, before that memo's POST is answered
  undo_portal  Undo's DELETE answered by a captive portal's 200 page (DevTools Fetch domain)
  share     opened as a Web Share Target (?title&text&url): the text waits in the page, unsent
  relay     the server's relay refuses: send, the page's relay line appears; History says why memos wait
  two_tabs  tab A queues 30 memos while sends fail; tab B drains them while A sends 15 more
  tabs_draft  A's unsent text opens in tab B, A sends it; then B's draft outlives a send in A
  quota     storage full for a long paste (413, back in the page); then a memo while sends fail, a reload
  old_outbox  an earlier page's outbox (one list) and draft: the memos go, the draft comes back
  portal    /send answered by a captive portal's 200 page, then by a 409 (DevTools Fetch domain)
  reasons   /send answered 500, then not at all, then by the server; a 413, then a memo taken
  unreachable_cold  /send and /i18n/ unreachable from the start: a send still says why
  escapes   200,000 bytes of quotes and control characters, without and with a subject
  saved_lang  the menu's language (jotter.lang) on the next visit, and with ?lang=
"""
import argparse
import email
import email.policy
import base64
import json
import os
import secrets
import signal
import sys
import time
import urllib.parse

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cdp  # noqa: E402

# Installed in every document before the page's scripts (CDP is not subject to the page's CSP).
# For each send (Ctrl+Enter keydown, or a click on #send): a capturing listener on window runs before
# the page's handlers; a bubbling one on window runs after them, still inside the same event dispatch,
# i.e. the same task: what it sees is what the page did synchronously. A zero-delay timer looks again
# in a later task.
PROBE = r"""
(() => {
  const probe = window.__jotterProbe = { sends: [], events: [] };
  const isSend = e => e.type === 'keydown' ? e.key === 'Enter' && (e.ctrlKey || e.metaKey)
                                           : !!(e.target.closest && e.target.closest('#send'));
  const state = () => {
    const t = document.getElementById('body'), s = document.getElementById('subject');
    return { empty: !!t && t.value === '', subjectEmpty: !!s && s.value === '',
             focused: !!t && document.activeElement === t };
  };
  // A click's form submission is its activation behaviour, which runs after the click's dispatch but
  // in the same task: for a click, the bubbling check waits for the submit event instead.
  for (const [type, after] of [['keydown', 'keydown'], ['click', 'submit']]) {
    addEventListener(type, e => {
      if (!isSend(e)) return;
      const t = document.getElementById('body'), s = document.getElementById('subject');
      const send = { via: type, valueBefore: t ? t.value : null, subjectBefore: s ? s.value : null,
                     focusBefore: document.activeElement && document.activeElement.id, start: performance.now() };
      probe.sends.push(send);
      setTimeout(() => { send.nextTask = state(); }, 0);
    }, true);
    addEventListener(after, e => {
      const send = probe.sends[probe.sends.length - 1];
      if (!send || send.via !== type || send.sameTask || (after === 'keydown' && !isSend(e))) return;
      send.sameTask = state();
      send.sameTaskAt = performance.now() - send.start;
      send.defaultPrevented = e.defaultPrevented;
    }, false);
  }
  for (const name of ['focus', 'blur', 'online', 'offline', 'pagehide', 'pageshow'])
    addEventListener(name, e => { if (e.target === window || e.target === document) probe.events.push(name); });
  document.addEventListener('visibilitychange', () => probe.events.push('visibility:' + document.visibilityState));
})();
"""

# The page's outbox: one key per unsent memo (jotter.outbox.ID), oldest first; the same order as the page's.
OUTBOX = r"""
(() => { try {
  return Object.keys(localStorage).filter(k => k.startsWith('jotter.outbox.'))
    .map(k => JSON.parse(localStorage.getItem(k))).sort((a, b) => a.created - b.created || (a.id < b.id ? -1 : 1));
} catch (e) { return 'unreadable: ' + e; } })()
"""
# True when the outbox is empty (the server has every memo).
OUTBOX_EMPTY = "!Object.keys(localStorage).some(k => k.startsWith('jotter.outbox'))"
# The newest draft any tab keeps (jotter.draft.TAB), or null.
DRAFT = r"""
(() => Object.keys(localStorage).filter(k => k.startsWith('jotter.draft'))
  .map(k => JSON.parse(localStorage.getItem(k))).sort((a, b) => (b.at || 0) - (a.at || 0))[0] || null)()
"""

STATE = r"""
(() => {
  const $ = id => document.getElementById(id);
  const body = $('body'), subject = $('subject'), pending = $('pending');
  const read = key => { try { return localStorage.getItem(key); } catch (e) { return 'unreadable: ' + e; } };
  const parsed = """ + OUTBOX.strip() + r""";
  return {
    body: body ? body.value : null,
    subject: subject ? subject.value : null,
    active: document.activeElement ? (document.activeElement.id || document.activeElement.tagName) : null,
    html_lang: document.documentElement.lang,
    html_dir: document.documentElement.dir,
    html_class: document.documentElement.className,
    visibility: document.visibilityState,
    outbox: parsed,
    rejected: read('jotter.rejected'),
    stored_lang: read('jotter.lang'),
    pending: pending ? {
      hidden: pending.hidden,
      display: getComputedStyle(pending).display,
      opacity: parseFloat(getComputedStyle(pending).opacity),
      text: pending.textContent.replace(/\s+/g, ' ').trim(),
    } : null,
    location: location.href,
    probe: window.__jotterProbe || null,
  };
})()
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the page, e.g. http://127.0.0.1:7373")
    parser.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    parser.add_argument("--maildir", help="the server's Maildir: report what was delivered")
    parser.add_argument("--timeout", type=float, default=45, help="hard limit for the whole run, seconds")
    args = parser.parse_args()

    # Stopped from outside (SIGTERM) or overdue (SIGALRM): unwind, so the browser is closed below.
    def stop(signum, frame):
        raise TimeoutError("stopped by signal %d" % signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(int(args.timeout))

    url = args.url if args.url.endswith("/") else args.url + "/"
    parts = urllib.parse.urlsplit(url)
    origin = "%s://%s" % (parts.scheme, parts.netloc)
    result = {"scenario": args.scenario, "url": url, "origin": origin, "error": None}
    browser = page = None
    started = time.monotonic()
    try:
        browser = cdp.Browser()
        result["browser"] = browser.version.get("product")
        page = browser.new_page()
        page.add_script_on_new_document(PROBE)
        SCENARIOS[args.scenario](page, url, result)
    except BaseException as error:  # also KeyboardInterrupt and the signals above: report, then clean up
        result["error"] = "%s: %s" % (type(error).__name__, error)
        if browser is not None:
            result["chromium_stderr"] = browser.stderr_tail()
    finally:
        signal.alarm(0)
        if page is not None:
            result["requests"] = page.requests
            result["foreign_requests"] = [r["url"] for r in page.requests if not same_origin(r["url"], origin)]
            result["problems"] = page.problems()
        if browser is not None:
            browser.close()
    if args.maildir:
        result["maildir"] = read_maildir(args.maildir)
    result["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(result, ensure_ascii=False), flush=True)
    return 0


def same_origin(url, origin):
    if url.split(":", 1)[0] in ("about", "data", "blob"):
        return True
    return url == origin or url.startswith(origin + "/")


def read_maildir(path):
    """Subject and body of every message in new/ and cur/, read by Python's email package."""
    messages = []
    for folder in ("new", "cur"):
        directory = os.path.join(path, folder)
        for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
            with open(os.path.join(directory, name), "rb") as f:
                message = email.message_from_binary_file(f, policy=email.policy.default)
            messages.append({"file": folder + "/" + name, "subject": str(message["subject"]),
                             "body": message.get_content().replace("\r\n", "\n")})
    return messages


def state(page):
    return page.evaluate(STATE)


def load(page, url):
    """Navigates, waits for load and the first painted frames (keys before them are dropped), then
    for the network to go quiet (manifest and icons fetched)."""
    since = len(page.events)
    page.navigate(url)
    page.wait_for_paint(since)
    try:
        page.wait_lifecycle("networkIdle", since=since, timeout=10)
    except cdp.CDPError:
        pass


def send_requests(page):
    return [r for r in page.requests if r["method"] == "POST" and r["url"].split("?")[0].endswith("/send")]


def await_caller(step, result):
    """Prints {"await": step} and waits for the caller's line on stdin."""
    print(json.dumps({"await": step}), flush=True)
    line = sys.stdin.readline()
    if not line:
        raise RuntimeError("stdin closed while waiting for the caller to %s" % step)
    result.setdefault("steps", []).append(step)
    return line.strip()


# -- scenarios ---------------------------------------------------------------------------------------


def settle(page, result):
    """After a send: wait until the page's outbox is empty, then a moment more (a second POST, if the
    page sent one, would show up), and record the final state and every POST /send."""
    try:
        page.wait_for(OUTBOX_EMPTY, timeout=20)
    except cdp.CDPError:
        pass
    time.sleep(0.3)
    result["settled"] = state(page)
    result["send_requests"] = send_requests(page)


def send_new_memo(page, result, text):
    """Types `text` and a random tail (result["memo"]) and sends it with Ctrl+Enter."""
    memo = "%s %s" % (text, secrets.token_hex(4))
    result["memo"] = memo
    page.type_text(memo)
    page.press_ctrl_enter()
    return memo


def open_history(page, ready, timeout):
    """Opens History and waits (up to `timeout` s) until the page script `ready` is true."""
    page.click(*page.center_of("#history-open"))
    try:
        page.wait_for(ready, timeout=timeout)
    except cdp.CDPError:
        pass


def scenario_send(page, url, result):
    load(page, url)
    memo = "Buy oat milk\nand bread %s" % secrets.token_hex(4)
    result["memo"] = memo
    result["before"] = state(page)          # autofocus: the textarea has focus without a click
    page.type_text(memo)
    result["typed"] = page.evaluate("document.getElementById('body').value")
    page.press_ctrl_enter()
    result["after_keydown"] = state(page)   # right after the key event's dispatch returned
    settle(page, result)
    wait(page, "document.getElementById('live').textContent !== ''", 10)
    result["live"] = page.evaluate("document.getElementById('live').textContent")


def scenario_subject(page, url, result):
    load(page, url)
    memo = "Call the plumber about the %s tap" % secrets.token_hex(4)
    subject = "Home %s" % secrets.token_hex(3)
    result["memo"], result["subject"] = memo, subject
    page.type_text(memo)
    page.click(*page.center_of("#subject"))
    page.type_text(subject)
    result["before"] = state(page)          # focus in the subject field now
    page.press_ctrl_enter()
    result["after_keydown"] = state(page)
    settle(page, result)


def scenario_button(page, url, result):
    load(page, url)
    memo = "Sent with the button %s" % secrets.token_hex(4)
    result["memo"] = memo
    page.type_text(memo)
    result["before"] = state(page)
    page.click(*page.center_of("#send"))
    result["after_click"] = state(page)
    settle(page, result)


def scenario_restart(page, url, result):
    load(page, url)
    memo = "Written while the server was away %s" % secrets.token_hex(4)
    result["memo"] = memo
    # The page asks /healthz once it has loaded; on a loaded machine that can come after load()
    # gave up waiting for the network to go quiet. Stop the server only once it has been answered,
    # so that the only refused requests are the ones this scenario is about.
    page.wait_for_response(lambda r: r["url"].split("?")[0].endswith("/healthz"), timeout=20)
    await_caller("stop-server", result)
    page.type_text(memo)
    page.press_ctrl_enter()
    result["after_keydown"] = state(page)
    time.sleep(1.5)  # two attempts (at once, then after 1 s) fail; the pending badge fades in after 1 s
    result["while_down"] = state(page)
    await_caller("start-server", result)
    restarted = time.monotonic()
    # The page should retry by itself (backoff: 1, 2, 4 s ...). If it has not within 10 s, the user
    # comes back to the tab (another tab in front, then this one again): visibilitychange and focus.
    result["delivered_by"] = None
    try:
        page.wait_for(OUTBOX_EMPTY, timeout=10, interval=0.05)
        result["delivered_by"] = "backoff"
    except cdp.CDPError:
        other = page.hide_by_other_tab()
        time.sleep(0.2)
        page.show(other)
        try:
            page.wait_for(OUTBOX_EMPTY, timeout=15, interval=0.05)
            result["delivered_by"] = "focus"
        except cdp.CDPError:
            pass
    result["seconds_after_restart"] = round(time.monotonic() - restarted, 2)
    time.sleep(0.3)
    result["settled"] = state(page)
    result["send_requests"] = send_requests(page)


def scenario_language(page, url, result):
    load(page, url)
    page.click(*page.center_of("#subject"))
    page.type_text("Groceries")
    page.key("Enter", "Enter", 13, text="\r")  # Enter in the subject moves on to the memo
    page.type_text("eggs and rice")
    # The caret somewhere in the middle, to see that the selection survives too.
    page.evaluate("document.getElementById('body').setSelectionRange(4, 7)")
    result["before"] = state(page)
    result["before"]["selection"] = page.evaluate(
        "[document.getElementById('body').selectionStart, document.getElementById('body').selectionEnd]")
    result["send_label_before"] = page.evaluate("document.querySelector('#send [data-i18n=send]').textContent")
    # As a user does it: click the select (its popup opens), arrow keys to 日本語, Enter.
    options = page.evaluate("[...document.getElementById('lang').options].map(o => o.value)")
    current = page.evaluate("document.getElementById('lang').value")
    result["options"] = options
    if "ja" not in options:
        raise RuntimeError("#lang has no 'ja' option: %s" % options)
    x, y = page.center_of("#lang")
    page.click(x, y)
    # Keys pressed before the popup is open would go to the closed select (a keyboard user's path,
    # after which the page rightly leaves the focus on the select).
    try:
        result["popup_opened"] = bool(page.wait_for("document.getElementById('lang').matches(':open')", timeout=10))
    except cdp.CDPError:
        result["popup_opened"] = False
    steps = options.index("ja") - options.index(current)
    for _ in range(abs(steps)):
        page.key("ArrowDown" if steps > 0 else "ArrowUp", "ArrowDown" if steps > 0 else "ArrowUp",
                 40 if steps > 0 else 38)
    page.key("Enter", "Enter", 13, text="\r")
    try:
        page.wait_for("document.documentElement.lang === 'ja'", timeout=15)
    except cdp.CDPError:
        pass
    time.sleep(0.5)  # the 0.3 s cross-dissolve
    result["after"] = state(page)
    result["after"]["selection"] = page.evaluate(
        "[document.getElementById('body').selectionStart, document.getElementById('body').selectionEnd]")
    result["send_label_after"] = page.evaluate("document.querySelector('#send [data-i18n=send]').textContent")
    result["body_placeholder_after"] = page.evaluate("document.getElementById('body').placeholder")
    # Keep typing: the text goes on where the caret was.
    page.key("End", "End", 35, modifiers=2)
    page.type_text(" ok")
    result["typed_after"] = page.evaluate("document.getElementById('body').value")


def scenario_rtl(page, url, result):
    load(page, url + "?lang=ar")
    result["state"] = state(page)
    result["layout"] = page.evaluate(r"""
      (() => {
        const rect = id => { const r = document.getElementById(id).getBoundingClientRect();
                             return { x: r.x, y: r.y, width: r.width, height: r.height }; };
        return {
          send: rect('send'), subject: rect('subject'), body: rect('body'),
          body_direction: getComputedStyle(document.getElementById('body')).direction,
          body_text_align: getComputedStyle(document.getElementById('body')).textAlign,
          viewport_width: innerWidth,
        };
      })()""")


def status_line(page, timeout):
    """Waits (up to `timeout` s) for the page's status line (#relay) to show; what it shows."""
    try:
        page.wait_for("!document.getElementById('relay').hidden", timeout=timeout)
    except cdp.CDPError:
        pass
    return page.evaluate(
        "(() => { const r = document.getElementById('relay'), b = r.getBoundingClientRect();"
        " return {hidden: r.hidden, text: r.textContent, visible: b.width > 0 && b.height > 0}; })()")


def scenario_relay(page, url, result):
    """The relay refuses (the caller's server fails every delivery as auth): send a memo, wait for the
    page's relay line, then open History."""
    load(page, url)
    send_new_memo(page, result, "Written while the mail server refuses")
    result["relay"] = status_line(page, timeout=15)
    open_history(page, "document.querySelectorAll('#history-list li').length > 0", timeout=10)
    result["history"] = page.evaluate(
        "[...document.querySelectorAll('#history-list li')].map(li => li.innerText)")


def scenario_damaged(page, url, result):
    """The server's database has a damaged page (the caller damaged it before starting the server): the
    page opens, and its status line says so."""
    load(page, url)
    result["relay"] = status_line(page, timeout=20)


def scenario_failed(page, url, result):
    """Every memo fails for good (the caller's server refuses it as too large, and the relay is fine): the
    page's status line says memos wait in History for Retry. Sent with Ctrl+Enter from the textarea, and
    then with focus nowhere (the margin clicked): the shortcut works from anywhere on the page."""
    load(page, url)
    page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    send_new_memo(page, result, "Refused for good")
    page.type_text("And another %s" % secrets.token_hex(4))
    page.evaluate("document.activeElement.blur()")
    result["active_before_shortcut"] = page.evaluate("document.activeElement.tagName")
    page.press_ctrl_enter()
    try:
        page.wait_for("document.getElementById('body').value === '' && %s.length === 0" % OUTBOX, timeout=15)
    except cdp.CDPError:
        pass
    result["body_after_shortcut"] = page.evaluate("document.getElementById('body').value")
    result["send_requests"] = send_requests(page)
    # The page looks at /healthz a moment after a send; a reload asks at once.
    load(page, url)
    result["relay"] = status_line(page, timeout=20)


def scenario_blank(page, url, result):
    """Memos no one could see (white space, zero-width and other ignorable characters, controls) are not
    sent: the button shakes and the text stays; one visible character among them is a memo."""
    load(page, url)
    page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    result["blank"] = []
    for text in ["   \n\t", "\u200b", "\u00a0\u2060\ufeff", "\u0085\u180e\u00ad", "\u200d\u2028"]:
        page.evaluate("(t => { t.value = %s; t.focus(); })(document.getElementById('body'))" % json.dumps(text))
        page.press_ctrl_enter()
        time.sleep(0.3)  # a POST would be on its way
        result["blank"].append({"kept": page.evaluate("document.getElementById('body').value") == text,
                                "sends": len(send_requests(page))})
    page.evaluate("(t => { t.value = '\\u200bx'; t.focus(); })(document.getElementById('body'))")
    page.press_ctrl_enter()
    try:
        page.wait_for(OUTBOX_EMPTY + " && document.getElementById('body').value === ''", timeout=15)
    except cdp.CDPError:
        pass
    result["visible_sends"] = [r.get("status") for r in send_requests(page)]


def scenario_dialogs(page, url, result):
    """The server holds 99 memos sent by a script; the page sends the 100th, and the rating prompt shows.
    Settings opened and closed with Escape leave the prompt alone (Escape was the dialog's); History
    shows the newest 50, and "Older memos" the rest."""
    load(page, url)
    page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    send_new_memo(page, result, "The hundredth")
    try:
        page.wait_for("!document.getElementById('rating').hidden", timeout=15)
    except cdp.CDPError:
        pass
    result["rating_shown"] = page.evaluate("!document.getElementById('rating').hidden")
    page.click(*page.center_of("#settings-open"))
    page.wait_for("document.getElementById('settings').open", timeout=10)
    page.key("Escape", "Escape", 27)
    page.wait_for("!document.getElementById('settings').open", timeout=10)
    result["rating_after_escape"] = page.evaluate("!document.getElementById('rating').hidden")
    result["rating_events"] = [r.get("post_data") for r in page.requests if r["method"] == "POST" and r["url"].endswith("/rating")]
    open_history(page, "document.querySelectorAll('#history-list li').length >= 50", timeout=15)
    result["history_first"] = page.evaluate("document.querySelectorAll('#history-list li').length")
    result["older"] = page.evaluate("(b => ({hidden: b.hidden, text: b.textContent}))(document.getElementById('history-more'))")
    page.evaluate("document.getElementById('history-more').scrollIntoView({block: 'center'})")
    page.click(*page.center_of("#history-more"))
    try:
        page.wait_for("document.querySelectorAll('#history-list li').length > 50", timeout=15)
    except cdp.CDPError:
        pass
    result["history_then"] = page.evaluate("document.querySelectorAll('#history-list li').length")
    result["older_then"] = page.evaluate("document.getElementById('history-more').hidden")


def scenario_undo_late(page, url, result):
    """Undo pressed after the server's window closed (a slow network, a computer that slept): the page
    says it is too late, instead of nothing."""
    load(page, url)
    page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    send_new_memo(page, result, "Too late to take back")
    page.wait_for("!document.getElementById('undo').hidden", timeout=15)
    await_caller("close-window", result)
    page.click(*page.center_of("#undo"))
    try:
        page.wait_for("document.getElementById('state').dataset.s === 'undo_late'"
                      " && document.getElementById('state').textContent !== ''", timeout=15)
    except cdp.CDPError:
        pass
    result["state"] = page.evaluate("(n => ({code: n.dataset.s, text: n.textContent}))(document.getElementById('state'))")
    result["body"] = page.evaluate("document.getElementById('body').value")
    result["requests_after"] = [r for r in page.requests if r["method"] == "DELETE"]


def scenario_relay_pending(page, url, result):
    """A Jotter relay has the memo and has not delivered it yet (the caller's server reports every
    attempt as relay_pending): send a memo, open History, wait for the entry's reason."""
    load(page, url)
    send_new_memo(page, result, "Handed to the relay")
    open_history(page, "document.querySelector('#history-list li p.e') !== null", timeout=20)
    result["history"] = page.evaluate(
        "[...document.querySelectorAll('#history-list li')].map(li => ({text: li.innerText,"
        " status: (li.querySelector('.st') || {}).textContent, retry: !!li.querySelector('button.retry')}))")


def scenario_share(page, url, result):
    """Opened as a Web Share Target: /?title=…&text=…&url=… (what Android sends to an installed app)."""
    shared = url + "?title=Idea%20%F0%9F%92%A1&text=Read%20this%20later&url=https%3A%2F%2Fexample.org%2Fa%3Fb%3D1"
    load(page, shared)
    try:
        page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    except cdp.CDPError:
        pass
    time.sleep(0.5)  # a silent send, if the page made one, would have started by now
    result["after"] = page.evaluate(
        "({subject: document.getElementById('subject').value, body: document.getElementById('body').value,"
        " location: location.href})")
    result["send_requests"] = send_requests(page)


def scenario_share_with_draft(page, url, result):
    """A draft is waiting when something is shared into Jotter: both are in the page, the draft first."""
    load(page, url)
    try:
        page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    except cdp.CDPError:
        pass
    page.type_text("Unsent draft")
    result["draft"] = json.dumps(page.evaluate(DRAFT))
    load(page, url + "?text=Read%20this%20later")
    try:
        page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    except cdp.CDPError:
        pass
    result["after"] = page.evaluate(
        "({subject: document.getElementById('subject').value, body: document.getElementById('body').value,"
        " draft: JSON.stringify(%s)})" % DRAFT.strip())


def send_then_undo(page, memo, result, typed_since=None):
    """Types and sends `memo`, types `typed_since` (the next memo begun), presses Undo while it shows,
    and records what followed."""
    page.type_text(memo)
    page.press_ctrl_enter()
    try:
        page.wait_for("!document.getElementById('undo').hidden", timeout=15)
    except cdp.CDPError:
        pass
    result["undo_shown"] = page.evaluate("!document.getElementById('undo').hidden")
    result["undo_label"] = page.evaluate("document.getElementById('undo').textContent")
    try:   # what a screen reader heard: the memo sent, and that Undo is there
        page.wait_for("document.getElementById('live').textContent !== ''", timeout=5)
    except cdp.CDPError:
        pass
    result["live_sent"] = page.evaluate("document.getElementById('live').textContent")
    if typed_since:
        page.type_text(typed_since)
    if result["undo_shown"]:
        page.click(*page.center_of("#undo"))
    try:
        page.wait_for("document.getElementById('body').value.indexOf(%s) >= 0" % json.dumps(memo), timeout=10)
    except cdp.CDPError:
        pass
    try:
        page.wait_for("(t => t !== '' && t !== %s)(document.getElementById('live').textContent)"
                      % json.dumps(result["live_sent"]), timeout=5)
    except cdp.CDPError:
        pass
    result["live_restored"] = page.evaluate("document.getElementById('live').textContent")
    result["after"] = state(page)
    result["requests_after"] = [r for r in page.requests if r["method"] == "DELETE"]


def scenario_undo(page, url, result):
    """The server holds memos for an undo window: send, then press Undo while it shows."""
    load(page, url)
    memo = "Sent by mistake %s" % secrets.token_hex(4)
    result["memo"] = memo
    try:
        page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    except cdp.CDPError:
        pass
    send_then_undo(page, memo, result)


def scenario_undo_typing(page, url, result):
    """Send, start the next memo, then press Undo: the memo taken back comes back, and the new text stays."""
    load(page, url)
    memo = "Sent by mistake %s" % secrets.token_hex(4)
    result["memo"] = memo
    try:
        page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    except cdp.CDPError:
        pass
    send_then_undo(page, memo, result, typed_since="Next thought")


def scenario_too_large(page, url, result):
    """A memo longer than the server takes: its text comes back into the page, which says why."""
    load(page, url)
    try:
        page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    except cdp.CDPError:
        pass
    page.type_text("x")
    page.evaluate("(t => { t.value = 'long '.repeat(60000); t.dispatchEvent(new Event('input', {bubbles: true})); })"
                  "(document.getElementById('body'))")
    result["length"] = page.evaluate("document.getElementById('body').value.length")
    page.press_ctrl_enter()
    try:
        page.wait_for("document.getElementById('state').textContent !== ''", timeout=15)
    except cdp.CDPError:
        pass
    result["note"] = page.evaluate("document.getElementById('state').textContent")
    result["body_length"] = page.evaluate("document.getElementById('body').value.length")
    result["pending"] = len(page.evaluate(OUTBOX))
    result["send_statuses"] = [r.get("status") for r in send_requests(page)]


def scenario_no_storage(page, url, result):
    """Storage refuses every write (site data blocked, quota full): a memo still goes out, and the page
    says it lives in this tab only until then."""
    page.add_script_on_new_document(
        "Storage.prototype.setItem = function () { throw new DOMException('full', 'QuotaExceededError'); };")
    load(page, url)
    try:
        page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    except cdp.CDPError:
        pass
    page.type_text("Kept in memory")
    page.press_ctrl_enter()
    try:
        page.wait_for("document.getElementById('state').textContent !== ''", timeout=15)
    except cdp.CDPError:
        pass
    result["note"] = page.evaluate("document.getElementById('state').textContent")
    try:
        page.wait_for("document.getElementById('pending').hidden", timeout=15)
    except cdp.CDPError:
        pass
    result["send_statuses"] = [r.get("status") for r in send_requests(page)]


def scenario_old_rejected(page, url, result):
    """Memos an earlier page set aside as refused (jotter.rejected) come back into the page, once."""
    load(page, url)
    page.evaluate("localStorage.setItem('jotter.rejected', JSON.stringify(["
                  "{id: 'a', subject: '', body: 'first refused', created: 1},"
                  "{id: 'b', subject: '', body: 'second refused', created: 2}]))")
    load(page, url)
    try:
        page.wait_for("document.getElementById('body').value !== ''", timeout=10)
    except cdp.CDPError:
        pass
    result["body"] = page.evaluate("document.getElementById('body').value")
    result["left"] = page.evaluate("localStorage.getItem('jotter.rejected')")


def scenario_undo_setting(page, url, result):
    """The server has no undo window: this device turns one on in Settings (keyboard only), sends, and
    takes the memo back."""
    load(page, url)
    page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    page.click(*page.center_of("#settings-open"))
    page.wait_for("document.getElementById('settings').open && document.getElementById('undo-s').options.length > 0",
                  timeout=10)
    result["options"] = page.evaluate("[...document.getElementById('undo-s').options].map(o => [o.value, o.text])")
    page.evaluate("document.getElementById('undo-s').focus()")
    page.key("ArrowDown", "ArrowDown", 40)
    page.key("ArrowDown", "ArrowDown", 40)
    result["chosen"] = page.evaluate("document.getElementById('undo-s').value")
    result["stored"] = page.evaluate("localStorage.getItem('jotter.undo')")
    page.key("Escape", "Escape", 27)
    try:   # the dialog's close event (which gives the textarea the focus back) comes a task later
        page.wait_for("document.activeElement.id === 'body'", timeout=15)
    except cdp.CDPError:
        pass
    result["active_after_close"] = page.evaluate("document.activeElement.id")
    memo = "Taken back %s" % secrets.token_hex(4)
    result["memo"] = memo
    send_then_undo(page, memo, result)
    result["send_requests"] = send_requests(page)


def scenario_destination(page, url, result):
    """Jotter delivers through a Jotter relay and no address is confirmed yet: a memo waits (the page
    says why); in Settings the person types an address, presses Enter, types the mailed code, presses
    Enter: the address is confirmed and the memo goes out. Keyboard only after the Settings click."""
    load(page, url)
    page.wait_for("!document.getElementById('foot').hidden", timeout=10)
    send_new_memo(page, result, "Sent before the address")
    page.wait_for(OUTBOX_EMPTY, timeout=15)
    await_caller("memo-held", result)
    # The page looks at /healthz a moment after a send; a reload asks at once.
    load(page, url)
    try:
        page.wait_for("!document.getElementById('relay').hidden", timeout=15)
    except cdp.CDPError:
        pass
    result["relay_line"] = page.evaluate("document.getElementById('relay').hidden ? null : document.getElementById('relay').textContent")
    page.click(*page.center_of("#settings-open"))
    page.wait_for("!document.getElementById('dest-s').hidden", timeout=10)
    result["before"] = page.evaluate("document.getElementById('dest-now').textContent")
    page.evaluate("document.getElementById('dest-a').focus()")
    page.type_text("ana@example.com")
    page.key("Enter", "Enter", 13, text="\r")
    try:
        page.wait_for("!document.getElementById('code-f').hidden && document.activeElement.id === 'code'", timeout=15)
    except cdp.CDPError:
        pass
    result["prompt"] = page.evaluate("document.getElementById('code-l').textContent")
    result["code_focused"] = page.evaluate("document.activeElement.id === 'code'")
    page.evaluate("document.getElementById('code').focus()")
    page.type_text("000000")   # wrong first
    page.key("Enter", "Enter", 13, text="\r")
    try:
        page.wait_for("document.getElementById('dest-e').textContent.length > 0", timeout=15)
    except cdp.CDPError:
        pass
    result["wrong"] = page.evaluate("document.getElementById('dest-e').textContent")
    code = await_caller("code", result)
    page.evaluate("document.getElementById('code').value = ''")
    page.type_text(code)
    page.key("Enter", "Enter", 13, text="\r")
    try:
        page.wait_for("document.getElementById('code-f').hidden", timeout=15)
    except cdp.CDPError:
        pass
    result["after"] = page.evaluate("document.getElementById('dest-now').textContent")
    result["error_after"] = page.evaluate("document.getElementById('dest-e').textContent")
    artifacts = os.environ.get("JOTTER_ARTIFACTS")
    if artifacts:   # a look at the dialog for a person (the test decides nothing from it)
        os.makedirs(artifacts, exist_ok=True)
        with open(os.path.join(artifacts, "settings.png"), "wb") as f:
            f.write(base64.b64decode(page.send("Page.captureScreenshot", {"format": "png"}, timeout=20)["data"]))


def scenario_privacy(page, url, result):
    load(page, url)
    page.type_text("Private thought")
    overlay = r"""
      (() => {
        const p = document.getElementById('privacy'), r = p.getBoundingClientRect();
        const t = document.getElementById('body').getBoundingClientRect();
        const top = document.elementFromPoint(t.x + t.width / 2, t.y + t.height / 2);
        return {
          visibility: document.visibilityState, html_class: document.documentElement.className,
          display: getComputedStyle(p).display,
          covers_viewport: r.width >= innerWidth && r.height >= innerHeight,
          on_top_of_textarea: top ? (top.id || top.tagName) : null,
          body: document.getElementById('body').value,
        };
      })()"""
    result["visible_before"] = page.evaluate(overlay)
    other = page.hide_by_other_tab()
    try:
        page.wait_for("document.visibilityState === 'hidden'", timeout=10)
    except cdp.CDPError:
        pass
    time.sleep(0.1)
    result["hidden"] = page.evaluate(overlay)
    page.show(other)
    try:
        page.wait_for("document.visibilityState === 'visible'", timeout=10)
    except cdp.CDPError:
        pass
    time.sleep(0.1)
    result["visible_again"] = page.evaluate(overlay)
    result["active_after"] = page.evaluate("document.activeElement && document.activeElement.id")
    result["page_events"] = page.evaluate("window.__jotterProbe && window.__jotterProbe.events")


def scenario_nojs(page, url, result):
    page.send("Emulation.setScriptExecutionDisabled", {"value": True})
    load(page, url + "?lang=de")  # the form's post comes back in the language it was sent from
    memo = "Sent without JavaScript %s" % secrets.token_hex(4)
    result["memo"] = memo
    # The page's script never ran: it would have filled the language list and shown the footer.
    # (DevTools' Runtime.evaluate still works with page scripts disabled.)
    result["script_ran"] = page.evaluate(
        "document.getElementById('lang').options.length > 0 || !document.getElementById('foot').hidden")
    result["before"] = page.evaluate("({active: document.activeElement && document.activeElement.id})")
    page.type_text(memo)
    result["typed"] = page.evaluate("document.getElementById('body').value")
    since = len(page.events)
    x, y = page.center_of("#send")
    page.click(x, y)
    page.wait_lifecycle("load", since=since, timeout=10)
    # `autofocus` applies with the first frame, which may come a moment after the load event on a busy
    # machine: wait for the frames (as `load` does), then a little for the focus itself.
    page.wait_for_paint(since)
    try:
        page.wait_for("document.activeElement && document.activeElement.id === 'body'", timeout=15)
    except cdp.CDPError:
        pass
    result["after"] = page.evaluate(
        "({body: document.getElementById('body').value, location: location.href, lang: document.documentElement.lang,"
        " active: document.activeElement && document.activeElement.id})")
    result["form_posts"] = [r for r in page.requests if r["method"] == "POST"]


# -- several tabs, and answers that are not the server's ---------------------------------------------


def ready(page, url):
    """Loads `url` and waits until the page's script has started (the footer shows)."""
    load(page, url)
    page.wait_for("!document.getElementById('foot').hidden", timeout=15)


def other_tab(page, url):
    """A second tab of the same browser, in a window of its own (so a process of its own, as a user's
    second window is), with the page loaded."""
    tab = page.browser.new_page(new_window=True)
    ready(tab, url)
    return tab


def wait(page, expression, timeout):
    """Whether `expression` became true within `timeout` seconds (a miss is an observation, not an error)."""
    try:
        page.wait_for(expression, timeout=timeout, interval=0.05)
        return True
    except cdp.CDPError:
        return False


def text_of(page, selector_id):
    return page.evaluate("document.getElementById(%s).value" % json.dumps(selector_id))


def tab_problems(tab):
    return {"tab_problems": tab.problems(), "tab_send_requests": send_requests(tab)}


class SendGate:
    """Answers the page's POST /send at the network (the DevTools Fetch domain), as a captive portal,
    a proxy or a stopped server would: each request gets the next of `answers` — (status, content type,
    body), or "no answer" (connection refused) — and once they are used up requests reach the server."""

    def __init__(self, page, answers, pattern="*/send*"):
        self.page, self.answers, self.seen, self.given = page, list(answers), len(page.events), []
        self.times = []   # when each request reached the gate (monotonic seconds)
        page.send("Fetch.enable", {"patterns": [{"urlPattern": pattern, "requestStage": "Request"}]})

    def pump(self):
        events = self.page.events
        while self.seen < len(events):
            _, method, params = events[self.seen]
            self.seen += 1
            if method != "Fetch.requestPaused":
                continue
            rid = params["requestId"]
            self.times.append(time.monotonic())
            answer = self.answers.pop(0) if self.answers else None
            if answer is None:
                self.page.send("Fetch.continueRequest", {"requestId": rid})
                self.given.append("server")
            elif answer == "no answer":
                self.page.send("Fetch.failRequest", {"requestId": rid, "errorReason": "ConnectionRefused"})
                self.given.append(answer)
            else:
                status, kind, body = answer
                self.page.send("Fetch.fulfillRequest", {
                    "requestId": rid, "responseCode": status,
                    "responseHeaders": [{"name": "Content-Type", "value": kind}],
                    "body": base64.b64encode(body.encode()).decode()})
                self.given.append(status)

    def wait(self, expression, timeout):
        """Answers requests until `expression` is true in the page; whether it became true in time."""
        deadline = time.monotonic() + timeout
        while True:
            self.pump()
            if self.page.evaluate(expression):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def scenario_comeback(page, url, result):
    """The server does not answer five times in a row (stopped for half a minute), then does: the page
    asks again at least every 10 s, so the memo goes within seconds of its return (it waited up to 60)."""
    ready(page, url)
    gate = SendGate(page, ["no answer"] * 5)
    send_new_memo(page, result, "Written while the server restarts")
    result["delivered"] = gate.wait(OUTBOX_EMPTY, timeout=90)
    result["given"] = gate.given
    result["gaps"] = [round(b - a, 2) for a, b in zip(gate.times, gate.times[1:])]


def scenario_undo_unreachable(page, url, result):
    """Undo pressed while the server does not answer (its DELETE and the four tries after it): the text
    comes back, and the page says the server may still send it."""
    ready(page, url)
    memo = send_new_memo(page, result, "Taken back while the server is away")
    page.wait_for("!document.getElementById('undo').hidden", timeout=15)
    gate = SendGate(page, ["no answer"] * 5, pattern="*/history/*")
    page.click(*page.center_of("#undo"))
    gate.wait("document.getElementById('state').dataset.s === 'undo_unsure'"
              " && document.getElementById('state').textContent !== ''", timeout=60)
    result["given"] = gate.given
    result["state"] = page.evaluate("(n => ({code: n.dataset.s, text: n.textContent}))(document.getElementById('state'))")
    result["body_has_memo"] = page.evaluate("document.getElementById('body').value.indexOf(%s) >= 0" % json.dumps(memo))



UNDO_SHOWN = "!document.getElementById('undo').hidden"


def held(page, since, timeout=10):
    """The DevTools id of the first request paused by the Fetch domain at event index `since` or later."""
    return page.wait_event("Fetch.requestPaused", since=since, timeout=timeout)["requestId"]


def scenario_undo_superseded(page, url, result):
    """Undo shows for memo A; memo B is sent while its POST is held (slow Wi-Fi, the server briefly
    away): A's Undo goes at once, and pressing where it was takes nothing back. Then memo C's 204 comes
    while D, sent after C, is still held: no Undo for C. D's own 204 brings Undo, and it takes D back."""
    ready(page, url)
    result["a"] = send_new_memo(page, {}, "Memo A")
    result["undo_for_a"] = wait(page, UNDO_SHOWN, 15)
    page.send("Fetch.enable", {"patterns": [{"urlPattern": "*/send*", "requestStage": "Request"}]})
    since = len(page.events)
    result["b"] = send_new_memo(page, {}, "Memo B")
    b = held(page, since)
    result["undo_while_b_held"] = page.evaluate(UNDO_SHOWN)
    if result["undo_while_b_held"]:   # what the user does with the button still there
        page.click(*page.center_of("#undo"))
        try:
            page.wait_for_response(lambda r: r["method"] == "DELETE", timeout=10)
        except cdp.CDPError:
            pass
    result["body_while_b_held"] = text_of(page, "body")
    page.send("Fetch.continueRequest", {"requestId": b})
    result["undo_for_b"] = wait(page, OUTBOX_EMPTY + " && " + UNDO_SHOWN, 15)

    since = len(page.events)
    result["c"] = send_new_memo(page, {}, "Memo C")
    c = held(page, since)
    result["undo_while_c_held"] = page.evaluate(UNDO_SHOWN)
    result["d"] = d_memo = send_new_memo(page, {}, "Memo D")   # waits behind C in the outbox
    since = len(page.events)
    page.send("Fetch.continueRequest", {"requestId": c})
    d = held(page, since)   # C's 204 has been handled: the page only posts D after it
    result["undo_while_d_held"] = page.evaluate(UNDO_SHOWN)
    page.send("Fetch.continueRequest", {"requestId": d})
    page.send("Fetch.disable")
    result["undo_for_d"] = wait(page, OUTBOX_EMPTY + " && " + UNDO_SHOWN, 15)
    if result["undo_for_d"]:
        page.click(*page.center_of("#undo"))
        wait(page, "document.getElementById('body').value.indexOf(%s) >= 0" % json.dumps(d_memo), 10)
    result["body"] = text_of(page, "body")
    result["deletes"] = [r for r in page.requests if r["method"] == "DELETE"]


def scenario_undo_portal(page, url, result):
    """Undo's DELETE is answered by a captive portal's 200 page, not by the server: the text comes back,
    and the page says the memo may still go (it does), not that it is back."""
    ready(page, url)
    memo = send_new_memo(page, result, "Taken back through a portal")
    result["undo_shown"] = wait(page, UNDO_SHOWN, 15)
    portal = (200, "text/html", "<!doctype html><title>Sign in to the Wi-Fi</title><form>…</form>")
    gate = SendGate(page, [portal], pattern="*/history/*")
    page.click(*page.center_of("#undo"))
    gate.wait("document.getElementById('state').dataset.s === 'undo_unsure'"
              " && document.getElementById('state').textContent !== ''", timeout=15)
    result["given"] = gate.given
    result["state"] = page.evaluate(
        "(n => ({code: n.dataset.s || '', text: n.textContent}))(document.getElementById('state'))")
    result["body_has_memo"] = page.evaluate("document.getElementById('body').value.indexOf(%s) >= 0" % json.dumps(memo))
    result["live"] = page.evaluate("document.getElementById('live').textContent")

def scenario_two_tabs(page, url, result):
    """Two tabs of one browser: tab A queues memos while sends fail; then, sends working again, tab B
    drains the backlog while A adds more. Every memo must reach the server, each once."""
    tag = secrets.token_hex(3)
    ready(page, url)
    other = other_tab(page, url)
    for tab in (page, other):
        tab.send("Network.setBlockedURLs", {"urls": ["*/send*"]})
    memos = []
    for i in range(30):
        memos.append("backlog %02d %s" % (i, tag))
        page.type_text(memos[-1])
        page.press_ctrl_enter()
    result["queued"] = len(page.evaluate(OUTBOX))
    for tab in (page, other):
        tab.send("Network.setBlockedURLs", {"urls": []})
        tab.evaluate("dispatchEvent(new Event('online'))")   # as a browser does in every tab
    for i in range(15):
        memos.append("new %02d %s" % (i, tag))
        page.type_text(memos[-1])
        page.press_ctrl_enter()
    result["memos"] = memos
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (page.evaluate(OUTBOX_EMPTY) and other.evaluate(OUTBOX_EMPTY)):
        for tab in (page, other):
            tab.evaluate("dispatchEvent(new Event('online'))")
        time.sleep(0.2)
    result["left"] = page.evaluate(OUTBOX)
    result["send_requests"] = send_requests(page)
    result.update(tab_problems(other))


def scenario_tabs_draft(page, url, result):
    """Tab A's unsent text opens in a new tab B; A sends it: B's copy goes (sending it from B would
    store it twice). Then B's own draft outlives a send in A, and a tab opened after B closed gets it."""
    tag = secrets.token_hex(3)
    ready(page, url)
    result["memo"] = memo = "memo typed in A " + tag
    page.type_text(memo)
    other = other_tab(page, url)
    wait(other, "document.getElementById('body').value !== ''", 10)
    result["b_opened_with"] = text_of(other, "body")
    page.press_ctrl_enter()
    wait(other, "document.getElementById('body').value === ''", 10)
    result["b_after_a_sent"] = text_of(other, "body")
    other.press_ctrl_enter()   # whatever B still shows goes too
    wait(page, OUTBOX_EMPTY, 20)
    time.sleep(0.3)
    result["draft"] = draft = "long draft in B " + tag
    other.type_text(draft)
    result["quick"] = quick = "quick memo from A " + tag
    page.type_text(quick)
    page.press_ctrl_enter()
    wait(page, OUTBOX_EMPTY, 20)
    result.update(tab_problems(other))
    page.browser.send("Target.closeTarget", {"targetId": other.target_id})
    third = page.browser.new_page()
    ready(third, url)
    wait(third, "document.getElementById('body').value !== ''", 10)
    result["c_opened_with"] = text_of(third, "body")
    result["send_requests"] = send_requests(page)


def scenario_quota(page, url, result):
    """Storage refuses one memo (the quota: storage is all but full, and the memo is a long paste, which
    the server then refuses too, 413, so it comes back); storage then has room again. Sends fail (the
    server unreachable) and a short memo is sent: it is kept in storage, not only in the tab, so a
    reload still has it; it goes once sends work."""
    ready(page, url)
    result["filled"] = page.evaluate("""(() => {
      let n = 0;
      for (const size of [1 << 20, 1 << 16, 1 << 12, 1 << 8])
        try { for (;;) localStorage.setItem('test.filler.' + n++, 'f'.repeat(size)); } catch (e) {}
      return n;
    })()""", timeout=60)
    page.evaluate("(t => { t.value = 'long '.repeat(60000); t.dispatchEvent(new Event('input', {bubbles: true})); })"
                  "(document.getElementById('body'))")
    page.press_ctrl_enter()
    wait(page, "document.getElementById('state').textContent !== ''", 30)
    result["note_big"] = page.evaluate("document.getElementById('state').dataset.s")
    page.evaluate("(t => { t.value = ''; t.dispatchEvent(new Event('input', {bubbles: true})); })(document.getElementById('body'))")
    page.evaluate("Object.keys(localStorage).forEach(k => k.startsWith('test.filler.') && localStorage.removeItem(k))")
    page.send("Network.setBlockedURLs", {"urls": ["*/send*"]})
    result["memo"] = memo = "important note typed while sends fail %s" % secrets.token_hex(3)
    page.type_text(memo)
    page.press_ctrl_enter()
    wait(page, "document.getElementById('state').dataset.s !== 'too_large'", 10)
    result["note_after"] = page.evaluate("document.getElementById('state').dataset.s")
    result["stored"] = page.evaluate(OUTBOX)
    ready(page, url)
    result["after_reload"] = page.evaluate(OUTBOX)
    page.send("Network.setBlockedURLs", {"urls": []})
    page.evaluate("dispatchEvent(new Event('online'))")
    wait(page, OUTBOX_EMPTY, 20)
    time.sleep(0.3)
    result["settled"] = state(page)
    result["send_requests"] = send_requests(page)


def scenario_portal(page, url, result):
    """Something else answers /send: a captive portal's 200 page (the memo must stay and go later),
    then a 409 (the memo must come back into the page, with a word)."""
    ready(page, url)
    portal = (200, "text/html", "<!doctype html><title>Sign in to the Wi-Fi</title><form>…</form>")
    conflict = (409, "application/json", '{"error":{"code":"idempotency_conflict","message":"…"}}')
    gate = SendGate(page, [portal])
    result["memo"] = memo = "through the portal %s" % secrets.token_hex(3)
    page.type_text(memo)
    page.press_ctrl_enter()
    # The portal's page is no word from the server: the memo stays, and goes once the server answers.
    gate.wait("%s && false" % OUTBOX_EMPTY, 0)
    result["left"] = gate.wait(OUTBOX_EMPTY, 20) and page.evaluate(OUTBOX)
    gate.answers.append(conflict)
    result["refused_memo"] = refused = "refused by a 409 %s" % secrets.token_hex(3)
    page.type_text(refused)
    page.press_ctrl_enter()
    gate.wait("document.getElementById('body').value !== '' && document.getElementById('state').textContent !== ''", 10)
    result["after_conflict"] = state(page)
    result["note"] = page.evaluate("document.getElementById('state').textContent")
    result["answers"] = gate.given


def scenario_reasons(page, url, result):
    """Sends fail, and the page says why: the server's 500, then no answer at all; the next memo the
    server takes ends the warning. A too-long memo's warning goes once a later memo is taken."""
    ready(page, url)
    note = "document.getElementById('state')"
    seen = lambda: page.evaluate("({code: %s.dataset.s || '', text: %s.textContent, shown: getComputedStyle(%s).display !== 'none'})"
                                 % (note, note, note))
    gate = SendGate(page, [(500, "application/json", '{"error":{"code":"internal","message":"…"}}'), "no answer"])
    page.type_text("first %s" % secrets.token_hex(3))
    page.press_ctrl_enter()
    gate.wait("%s.textContent !== ''" % note, 10)
    result["on_500"] = seen()
    gate.wait("%s.dataset.s !== %s" % (note, json.dumps(result["on_500"]["code"])), 10)
    result["on_no_answer"] = seen()
    gate.wait(OUTBOX_EMPTY + " && %s.textContent === ''" % note, 20)
    result["after_success"] = seen()
    page.evaluate("(t => { t.value = 'long '.repeat(60000); t.dispatchEvent(new Event('input', {bubbles: true})); })"
                  "(document.getElementById('body'))")
    page.press_ctrl_enter()
    gate.wait("%s.dataset.s === 'too_large' && %s.textContent !== ''" % (note, note), 15)
    result["on_too_large"] = seen()
    page.evaluate("(t => { t.value = ''; t.dispatchEvent(new Event('input', {bubbles: true})); })(document.getElementById('body'))")
    result["memo"] = memo = "short one %s" % secrets.token_hex(3)
    page.type_text(memo)
    page.press_ctrl_enter()
    gate.wait(OUTBOX_EMPTY + " && %s.textContent === ''" % note, 15)
    time.sleep(0.3)
    result["after_next"] = seen()
    result["answers"] = gate.given
    result["send_requests"] = send_requests(page)


def scenario_escapes(page, url, result):
    """Memos of 200,000 bytes of quotes and control characters, without and with a subject: within the
    server's cap as text, twice past it as JSON. Both must be taken. (Reduced motion: the fading copy
    of 100,000 control characters alone takes Chromium seconds to lay out.)"""
    page.send("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-reduced-motion", "value": "reduce"}]})
    ready(page, url)
    page.evaluate("(t => { t.value = '\"\\u0001'.repeat(100000); t.dispatchEvent(new Event('input', {bubbles: true})); })"
                  "(document.getElementById('body'))", timeout=60)
    result["length"] = page.evaluate("new TextEncoder().encode(document.getElementById('body').value).length")
    page.press_ctrl_enter()
    wait(page, OUTBOX_EMPTY, 20)
    page.evaluate("document.getElementById('subject').focus()")
    page.type_text("Quotes")
    page.evaluate("(t => { t.value = '\"\\u0001'.repeat(100000); t.dispatchEvent(new Event('input', {bubbles: true})); })"
                  "(document.getElementById('body'))", timeout=60)
    page.press_ctrl_enter()   # in the subject field: subject and memo go
    wait(page, OUTBOX_EMPTY, 20)
    time.sleep(0.3)
    result["settled"] = state(page)
    result["note"] = page.evaluate("document.getElementById('state').dataset.s || ''")
    result["send_requests"] = [{k: r.get(k) for k in ("status", "headers")} for r in send_requests(page)]


def scenario_saved_lang(page, url, result):
    """The language chosen in the menu comes back on the next visit; ?lang= in the address still wins."""
    ready(page, url)
    result["first"] = page.evaluate("document.documentElement.lang")
    page.evaluate("localStorage.setItem('jotter.lang', 'ja')")
    ready(page, url)
    page.type_text("typed at once")
    wait(page, "document.documentElement.lang === 'ja'", 10)
    result["again"] = page.evaluate("({lang: document.documentElement.lang, send: document.querySelector('#send span').textContent,"
                                    " menu: document.getElementById('lang').value, location: location.href,"
                                    " body: document.getElementById('body').value,"
                                    " active: document.activeElement && document.activeElement.id})")
    ready(page, url + "?lang=fr")
    time.sleep(1)
    result["with_query"] = page.evaluate("({lang: document.documentElement.lang, menu: document.getElementById('lang').value})")


def scenario_old_outbox(page, url, result):
    """An earlier page left its outbox as one list (jotter.outbox) and its draft under jotter.draft:
    the memos go, once each, and the draft comes back into the page."""
    ready(page, url)
    tag = secrets.token_hex(3)
    result["memos"] = memos = ["queued before %s %d" % (tag, i) for i in range(2)]
    old = [{"id": "%08x-0000-4000-8000-%012d" % (secrets.randbits(32), i), "subject": "", "body": m,
            "created": 1000 + i, "tries": 3} for i, m in enumerate(memos)]
    result["draft"] = draft = "old draft %s" % tag
    page.send("Network.setBlockedURLs", {"urls": ["*/send*"]})   # nothing goes until the page is loaded again
    page.evaluate("localStorage.setItem('jotter.outbox', %s); localStorage.setItem('jotter.draft', %s)"
                  % (json.dumps(json.dumps(old)), json.dumps(json.dumps({"subject": "", "body": draft}))))
    page.send("Network.setBlockedURLs", {"urls": []})
    ready(page, url)
    wait(page, OUTBOX_EMPTY + " && document.getElementById('body').value !== ''", 20)
    time.sleep(0.3)
    result["settled"] = state(page)
    result["old_key"] = page.evaluate("localStorage.getItem('jotter.outbox')")
    result["send_requests"] = send_requests(page)


def scenario_unreachable_cold(page, url, result):
    """The server is gone before the page could fetch its strings (/i18n/ too is unreachable): a failed
    send still says why, in the page's language."""
    page.send("Network.setBlockedURLs", {"urls": ["*/send*", "*/i18n/*"]})
    ready(page, url + "?lang=de")
    page.type_text("sent into the void")
    page.press_ctrl_enter()
    wait(page, "document.getElementById('state').textContent !== ''", 10)
    result["note"] = page.evaluate("document.getElementById('state').textContent")
    result["pending"] = len(page.evaluate(OUTBOX))


SCENARIOS = {
    "send": scenario_send,
    "subject": scenario_subject,
    "button": scenario_button,
    "restart": scenario_restart,
    "language": scenario_language,
    "rtl": scenario_rtl,
    "privacy": scenario_privacy,
    "nojs": scenario_nojs,
    "relay": scenario_relay,
    "damaged": scenario_damaged,
    "failed": scenario_failed,
    "dialogs": scenario_dialogs,
    "blank": scenario_blank,
    "comeback": scenario_comeback,
    "undo_unreachable": scenario_undo_unreachable,
    "undo_late": scenario_undo_late,
    "undo_superseded": scenario_undo_superseded,
    "undo_portal": scenario_undo_portal,
    "relay_pending": scenario_relay_pending,
    "share": scenario_share,
    "undo": scenario_undo,
    "undo_typing": scenario_undo_typing,
    "too_large": scenario_too_large,
    "no_storage": scenario_no_storage,
    "old_rejected": scenario_old_rejected,
    "share_with_draft": scenario_share_with_draft,
    "undo_setting": scenario_undo_setting,
    "destination": scenario_destination,
    "two_tabs": scenario_two_tabs,
    "tabs_draft": scenario_tabs_draft,
    "quota": scenario_quota,
    "old_outbox": scenario_old_outbox,
    "portal": scenario_portal,
    "reasons": scenario_reasons,
    "unreachable_cold": scenario_unreachable_cold,
    "escapes": scenario_escapes,
    "saved_lang": scenario_saved_lang,
}

if __name__ == "__main__":
    sys.exit(main())
