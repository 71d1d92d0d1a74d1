#!/usr/bin/python3
"""Drives Jotter's page as a phone in headless Chromium and prints what it observed, as one JSON object.

    /usr/bin/python3 Tests/Browser/phone_test.py --url http://127.0.0.1:PORT --scenario NAME
        [--lang TAG] [--maildir PATH] [--artifacts DIR]

Like page_test.py, the driver observes and does not judge; the Swift suite
(Tests/JotterTests/PhoneBrowserTests.swift) asserts. What only the test can do (issue a pairing link,
revoke a device) the driver asks for with a line {"await": STEP} and reads the caller's answer, one
line on stdin: a pairing token, or "ok".

Every tab is a phone (390×844 CSS px, mobile, touch, an Android Chrome User-Agent with its client
hints; sends are taps; not the computer itself, see OFF_THIS_MACHINE) except in "computer", which is
the computer's own page. Tabs that must not share storage (a second phone) get a fresh browser
context, i.e. a fresh profile.

Every scenario also reports requests (of all its tabs, each with its "tab"), foreign_requests,
problems and, with --maildir, the delivered messages, as page_test.py does.

Scenarios:
  unpaired   LAN, not paired: two memos typed and tapped; where it stands (#state), the outbox, the
             POSTs to /send in a 3 s window, History; a screenshot in --lang; then the caller's pairing
             token is set as location.hash in the same tab: the exchange, the address bar, delivery
  links      LAN: a link pairs one phone, which then opens it again and sends a memo; the same link
             on a second phone (used), an expired link, a link nobody issued: what each phone says
  new-tab    LAN, not paired: a memo tapped; the link opened in a new tab of the same browser (as a
             camera app does): the old tab's memo goes, once, and the old tab knows it is paired
  revoked    LAN: paired, then revoked by the caller; two memos tapped; then paired again in the same tab
  computer   LAN, the computer's page: "Pair a phone", its QR code (PNG screenshots for zbarimg),
             "New link"; then in a 390 px wide window in every language: the footer
  local      local mode: a pairing link opened, a memo sent, History, another link: no pairing request
  draft      subject and memo typed, reload, sent, reload
"""
import argparse
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
import page_test  # noqa: E402

# A Pixel 8 running Chrome, with the client hints Chromium would send for it.
PHONE_UA = ("Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
            "Chrome/131.0.0.0 Mobile Safari/537.36")
PHONE_METADATA = {"brands": [{"brand": "Chromium", "version": "131"}, {"brand": "Google Chrome", "version": "131"}],
                  "platform": "Android", "platformVersion": "14.0.0", "architecture": "", "model": "Pixel 8",
                  "mobile": True}
PHONE_SIZE = (390, 844)

# Installed in every document before the page's scripts: every change of #state (its code, text and
# class) with its time, and the hashchange events.
PROBE = r"""
(() => {
  const probe = window.__phone = { states: [], hashchanges: 0 };
  const watch = () => {
    const n = document.getElementById('state');
    if (!n) return;
    new MutationObserver(() => probe.states.push({ code: n.dataset.s || null, text: n.textContent,
                                                   cls: n.className, at: Math.round(performance.now()) }))
      .observe(n, { childList: true, characterData: true, subtree: true, attributes: true });
  };
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', watch); else watch();
  addEventListener('hashchange', () => probe.hashchanges++);
})();
"""

# The test's phone is on loopback, where GET /pairing offers "Pair a phone" (can_pair_others: the
# peer is the computer itself). A phone on the Wi-Fi is not: phone tabs get can_pair_others false,
# as the server answers a phone, so the screen is a phone's.
OFF_THIS_MACHINE = r"""
(() => {
  const fetch = window.fetch;
  window.fetch = function (resource) {
    const answer = fetch.apply(this, arguments);
    if (new URL(resource.url || resource, location.href).pathname !== '/pairing') return answer;
    return answer.then(r => !r.ok ? r : r.json().then(j => {
      j.can_pair_others = false;
      return new Response(JSON.stringify(j), { status: r.status, statusText: r.statusText, headers: r.headers });
    }));
  };
})();
"""

STATE = r"""
(() => {
  const $ = id => document.getElementById(id);
  const read = key => { try { return localStorage.getItem(key); } catch (e) { return null; } };
  const parse = v => { try { return v ? JSON.parse(v) : null; } catch (e) { return 'not JSON'; } };
  const shown = e => !e.hidden && getComputedStyle(e).display !== 'none';
  // The page keeps one key per unsent memo (jotter.outbox.ID) and one draft per tab (jotter.draft.TAB).
  const all = pre => { try { return Object.keys(localStorage).filter(k => k.startsWith(pre)).map(k => parse(read(k))); }
                       catch (e) { return []; } };
  const outbox = all('jotter.outbox.').sort((a, b) => a.created - b.created || (a.id < b.id ? -1 : 1));
  const note = $('state'), style = getComputedStyle(note);
  return {
    started: !$('foot').hidden,
    state: { code: note.dataset.s || null, text: note.textContent, cls: note.className,
             display: style.display, opacity: parseFloat(style.opacity) },
    outbox: outbox.map(m => ({ subject: m.subject, body: m.body })),
    draft: all('jotter.draft').sort((a, b) => (b.at || 0) - (a.at || 0))[0] || null,
    token_stored: !!read('jotter.token'),
    subject: $('subject').value,
    body: $('body').value,
    active: document.activeElement ? (document.activeElement.id || document.activeElement.tagName) : null,
    pending: { shown: shown($('pending')), text: $('pending').textContent.replace(/\s+/g, ' ').trim() },
    pair_open: { shown: shown($('pair-open')), text: $('pair-open').textContent },
    html_lang: document.documentElement.lang,
    html_dir: document.documentElement.dir,
    location: location.href,
    same_document: window.__sameDocument === 1,
    states: window.__phone ? window.__phone.states : [],
    hashchanges: window.__phone ? window.__phone.hashchanges : 0,
  };
})()
"""

# Where things are on the screen, for the layout checks (CSS px of the viewport).
LAYOUT = r"""
(() => {
  const box = id => { const r = document.getElementById(id).getBoundingClientRect();
                      return { x: r.x, y: r.y, width: r.width, height: r.height }; };
  return { viewport: { width: innerWidth, height: innerHeight }, state: box('state'), send: box('send'),
           subject: box('subject'), body: box('body'), foot: box('foot'),
           foot_items: [...document.getElementById('foot').children].filter(e => !e.hidden).map(e => box(e.id)),
           state_scroll_width: document.getElementById('state').scrollWidth,
           page_scroll_width: document.documentElement.scrollWidth };
})()
"""


class Tabs:
    """The tabs a scenario opened, to report all their requests and problems at the end."""

    def __init__(self, browser):
        self.browser = browser
        self.all = []

    def open(self, name, phone=True, fresh_profile=False):
        """A tab (a phone unless phone=False), attached and probed; fresh_profile: its own storage."""
        params = {"url": "about:blank"}
        if fresh_profile:
            params["browserContextId"] = self.browser.send("Target.createBrowserContext")["browserContextId"]
        page = self.browser.attach(self.browser.send("Target.createTarget", params)["targetId"])
        page.name = name
        if phone:
            width, height = PHONE_SIZE
            page.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                             "deviceScaleFactor": 2, "mobile": True})
            page.send("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 5})
            page.send("Emulation.setUserAgentOverride", {"userAgent": PHONE_UA, "platform": "Linux armv8l",
                                                         "userAgentMetadata": PHONE_METADATA})
            page.add_script_on_new_document(OFF_THIS_MACHINE)
        page.add_script_on_new_document(PROBE)
        self.all.append(page)
        return page

    def close(self, page):
        """Closes a tab that is done (its records stay)."""
        try:
            self.browser.send("Target.closeTarget", {"targetId": page.target_id})
        except cdp.CDPError:
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the page, e.g. http://127.0.0.1:7373")
    parser.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    parser.add_argument("--lang", default="en", help="the page's language (?lang=)")
    parser.add_argument("--maildir", help="the server's Maildir: report what was delivered")
    parser.add_argument("--artifacts", help="where screenshots go (created if missing)")
    parser.add_argument("--timeout", type=float, default=90, help="hard limit for the whole run, seconds")
    args = parser.parse_args()

    def stop(signum, frame):
        raise TimeoutError("stopped by signal %d" % signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(int(args.timeout))

    args.url = args.url if args.url.endswith("/") else args.url + "/"
    parts = urllib.parse.urlsplit(args.url)
    origin = "%s://%s" % (parts.scheme, parts.netloc)
    if args.artifacts:
        os.makedirs(args.artifacts, exist_ok=True)
    result = {"scenario": args.scenario, "lang": args.lang, "url": args.url, "origin": origin, "error": None}
    browser = tabs = None
    started = time.monotonic()
    try:
        browser = cdp.Browser()
        result["browser"] = browser.version.get("product")
        tabs = Tabs(browser)
        SCENARIOS[args.scenario](tabs, args, result)
    except BaseException as error:  # also the signals above: report, then clean up
        result["error"] = "%s: %s" % (type(error).__name__, error)
        if browser is not None:
            result["chromium_stderr"] = browser.stderr_tail()
    finally:
        signal.alarm(0)
        if tabs is not None:
            result["requests"] = [dict(r, tab=p.name) for p in tabs.all for r in p.requests]
            result["foreign_requests"] = [r["url"] for r in result["requests"]
                                          if not page_test.same_origin(r["url"], origin)]
            problems = {}
            for p in tabs.all:
                for kind, entries in p.problems().items():
                    problems.setdefault(kind, []).extend(dict(e, tab=p.name) for e in entries)
            result["problems"] = problems
        if browser is not None:
            browser.close()
    if args.maildir:
        result["maildir"] = page_test.read_maildir(args.maildir)
    result["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(result, ensure_ascii=False), flush=True)
    return 0


# -- helpers -----------------------------------------------------------------------------------------


def ask(step):
    """Prints {"await": step} and returns the caller's one-line answer."""
    print(json.dumps({"await": step}), flush=True)
    line = sys.stdin.readline()
    if not line:
        raise RuntimeError("stdin closed while waiting for the caller to %s" % step)
    return line.strip()


def state(page):
    return page.evaluate(STATE)


def open_page(page, url, idle=True):
    """Loads `url` and waits until the page's script has started (it shows the footer then); idle:
    first for the network to go quiet as well."""
    if idle:
        page_test.load(page, url)
    else:
        since = len(page.events)
        page.navigate(url)
        page.wait_for_paint(since)
    page.wait_for("!document.getElementById('foot').hidden", timeout=15)


def tap(page, selector):
    """A finger's tap on the element's centre (touch events; the browser makes the click)."""
    x, y = page.center_of(selector)
    page.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [{"x": x, "y": y}]})
    page.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})


def wait_state(page, code, timeout=15):
    """Waits until #state holds `code` with a text; returns the state (also when it never came)."""
    try:
        page.wait_for("(n => n.dataset.s === %s && n.textContent !== '')(document.getElementById('state'))"
                      % json.dumps(code), timeout=timeout)
    except cdp.CDPError:
        pass
    return state(page)


def wait_outbox_empty(page, timeout=15):
    """Seconds until the page's outbox is empty, or None."""
    start = time.monotonic()
    try:
        page.wait_for("!Object.keys(localStorage).some(k => k.startsWith('jotter.outbox'))", timeout=timeout, interval=0.05)
    except cdp.CDPError:
        return None
    return round(time.monotonic() - start, 2)


def requests_to(page, method, path):
    return [r for r in page.requests if r["method"] == method and urllib.parse.urlsplit(r["url"]).path == path]


def statuses(requests):
    return [r["status"] for r in requests]


def screenshot(page, args, name, clip=None):
    """A PNG in --artifacts (whole viewport, or `clip` in CSS px at scale 2); returns its path."""
    if not args.artifacts:
        return None
    params = {"format": "png"}
    if clip:
        params["clip"] = dict(clip, scale=2)
    data = page.send("Page.captureScreenshot", params, timeout=20)["data"]
    path = os.path.join(args.artifacts, name)
    with open(path, "wb") as f:
        f.write(base64.b64decode(data))
    return path


def memo_text(label):
    return "Phone memo %s %s" % (label, secrets.token_hex(3))


def type_and_tap_send(page, memo):
    page.type_text(memo)
    tap(page, "#send")


def lang_url(args):
    return args.url + "?lang=" + urllib.parse.quote(args.lang)


# -- scenarios ---------------------------------------------------------------------------------------


def scenario_unpaired(tabs, args, result):
    page = tabs.open("phone")
    # A quick thumb on a slow Wi-Fi: the page's GET /pairing is held until both memos are tapped, so
    # the first memo goes out before the page knows where it stands, and its 401 has to tell it.
    page.send("Fetch.enable", {"patterns": [{"urlPattern": "*/pairing", "requestStage": "Request"}]})
    open_page(page, lang_url(args), idle=False)
    held = page.wait_event("Fetch.requestPaused", timeout=15)
    memos = [memo_text("one"), memo_text("two")]
    result["memos"] = memos
    result["typed_and_tapped"] = []
    type_and_tap_send(page, memos[0])
    result["typed_and_tapped"].append(state(page))
    result["not_paired_by_401"] = wait_state(page, "not_paired")
    type_and_tap_send(page, memos[1])
    result["typed_and_tapped"].append(state(page))
    page.send("Fetch.continueRequest", {"requestId": held["requestId"]})
    page.send("Fetch.disable")
    page.wait_for("performance.getEntriesByType('resource').some(e => e.name.endsWith('/pairing'))", timeout=15)
    result["not_paired"] = wait_state(page, "not_paired")
    # Where it stands is known (GET /pairing or a 401): from now on the page should stay quiet.
    before = len(requests_to(page, "POST", "/send"))
    time.sleep(3)
    sends = requests_to(page, "POST", "/send")
    result["sends_before_window"] = statuses(sends[:before])
    result["sends_in_window"] = statuses(sends[before:])
    result["after_window"] = state(page)
    result["layout"] = dict(page.evaluate(LAYOUT), screen_width=PHONE_SIZE[0])
    result["screenshot"] = screenshot(page, args, "phone-not-paired-%s.png" % args.lang)

    tap(page, "#history-open")
    try:
        page.wait_for("(e => !e.hidden && e.textContent)(document.getElementById('history-error'))", timeout=15)
    except cdp.CDPError:
        pass
    result["history"] = page.evaluate(
        "({open: document.getElementById('history').open,"
        " error_shown: !document.getElementById('history-error').hidden,"
        " error: document.getElementById('history-error').textContent,"
        " empty_shown: !document.getElementById('history-empty').hidden,"
        " items: document.querySelectorAll('#history-list li').length})")
    tap(page, "#history-close")
    page.wait_for("!document.getElementById('history').open", timeout=10)

    token = ask("pairing-token")
    page.evaluate("window.__sameDocument = 1")
    pairs_before = len(requests_to(page, "POST", "/pair"))
    started = time.monotonic()
    page.evaluate("location.hash = '#pair=' + %s" % json.dumps(token))
    result["paired"] = wait_state(page, "paired")
    result["seconds_to_paired"] = round(time.monotonic() - started, 2)
    emptied = wait_outbox_empty(page)
    result["seconds_to_delivered"] = None if emptied is None else round(time.monotonic() - started, 2)
    time.sleep(0.5)  # a second POST of either memo would show up
    result["settled"] = state(page)
    result["url_holds_token"] = token in result["settled"]["location"]
    result["pair_requests"] = statuses(requests_to(page, "POST", "/pair")[pairs_before:])
    result["sends_after_pairing"] = [{"status": r["status"], "key": r.get("headers", {}).get("Idempotency-Key")}
                                     for r in requests_to(page, "POST", "/send")[len(sends):]]
    result["all_statuses"] = statuses(page.requests)


def scenario_links(tabs, args, result):
    token = ask("pairing-token")
    first = tabs.open("first-phone", fresh_profile=True)
    open_page(first, lang_url(args) + "#pair=" + token)
    result["first"] = wait_state(first, "paired")
    result["first"]["pair_requests"] = statuses(requests_to(first, "POST", "/pair"))
    # The paired phone opens the same link again (scanned twice): it is still paired, and can send.
    since = first.evaluate("Math.round(performance.now())")
    first.evaluate("location.hash = '#pair=' + %s" % json.dumps(token))
    try:
        first.wait_for("window.__phone.states.some(s => s.at >= %d && s.text && s.code !== 'not_paired')" % since,
                       timeout=10)
    except cdp.CDPError:
        pass
    time.sleep(0.5)  # what it says next, if it changes its mind
    result["first_again"] = state(first)
    result["first_again"]["pair_requests"] = statuses(requests_to(first, "POST", "/pair"))
    memo = memo_text("still paired")
    result["still_paired_memo"] = memo
    type_and_tap_send(first, memo)
    wait_outbox_empty(first)
    result["first_again"]["send_requests"] = statuses(requests_to(first, "POST", "/send"))
    tabs.close(first)

    second = tabs.open("second-phone", fresh_profile=True)
    open_page(second, lang_url(args) + "#pair=" + token)
    result["used"] = wait_state(second, "pairing_link_used")
    result["used"]["pair_requests"] = statuses(requests_to(second, "POST", "/pair"))
    result["used"]["url_holds_token"] = token in result["used"]["location"]
    # It cannot send: the memo waits, and nothing is tried.
    memo = memo_text("unsent")
    result["unsent_memo"] = memo
    type_and_tap_send(second, memo)
    time.sleep(1)
    result["used_after_send"] = state(second)
    result["used_after_send"]["send_requests"] = statuses(requests_to(second, "POST", "/send"))
    tabs.close(second)

    expired = ask("expired-token")
    third = tabs.open("expired-phone", fresh_profile=True)
    open_page(third, lang_url(args) + "#pair=" + expired)
    result["expired"] = wait_state(third, "pairing_link_expired")
    result["expired"]["pair_requests"] = statuses(requests_to(third, "POST", "/pair"))
    tabs.close(third)

    fourth = tabs.open("unknown-link-phone", fresh_profile=True)
    open_page(fourth, lang_url(args) + "#pair=" + secrets.token_urlsafe(32))
    result["invalid"] = wait_state(fourth, "pairing_link_invalid")
    result["invalid"]["pair_requests"] = statuses(requests_to(fourth, "POST", "/pair"))
    tabs.close(fourth)


def code_field(page):
    return page.evaluate(
        "(p => ({shown: !p.hidden && p.getBoundingClientRect().height > 0,"
        " value: document.getElementById('pc-i').value,"
        " placeholder: document.getElementById('pc-i').placeholder,"
        " button: document.getElementById('pc-b').textContent}))(document.getElementById('pc'))")


def type_code(page, code):
    tap(page, "#pc-i")
    page.evaluate("(i => (i.value = '', i.focus()))(document.getElementById('pc-i'))")
    page.type_text(code)


def scenario_code(tabs, args, result):
    """An app on the home screen has no address bar to open a link in: the phone pairs by typing the
    code the computer shows. A wrong code first (entered with the keyboard's Enter), then the right
    one as a Japanese keyboard might give it (full-width, lower case, a Unicode dash), with Pair."""
    page = tabs.open("phone")
    open_page(page, lang_url(args))
    memo = memo_text("before the code")
    result["memo"] = memo
    type_and_tap_send(page, memo)
    result["not_paired"] = wait_state(page, "not_paired")
    try:
        page.wait_for("!document.getElementById('pc').hidden", timeout=15)
    except cdp.CDPError:
        pass
    result["field_before"] = code_field(page)
    type_code(page, "ZZZZ-ZZZZ\n")
    result["wrong"] = wait_state(page, "code_invalid")
    result["wrong"]["field"] = code_field(page)
    result["wrong"]["send_requests"] = statuses(requests_to(page, "POST", "/send"))
    code = ask("pairing-code")
    page.evaluate("(i => (i.value = '', i.focus()))(document.getElementById('pc-i'))")
    page.send("Input.insertText", {"text": "".join(chr(ord(c) + 0xFEE0) if c != "-" else "\u2010" for c in code.lower())})
    tap(page, "#pc-b")
    result["paired"] = wait_state(page, "paired")
    result["delivered_in"] = wait_outbox_empty(page)
    time.sleep(0.5)  # a second POST of the memo would show up
    result["settled"] = state(page)
    result["field_after"] = code_field(page)
    result["pair_requests"] = statuses(requests_to(page, "POST", "/pair"))
    result["send_requests"] = statuses(requests_to(page, "POST", "/send"))


def scenario_paste(tabs, args, result):
    """An app on the home screen, and the whole link pasted into the code field (copied on the computer,
    sent to the phone): it pairs, as the link's token, and the memo that waited goes."""
    page = tabs.open("phone")
    open_page(page, lang_url(args))
    memo = memo_text("before the pasted link")
    result["memo"] = memo
    type_and_tap_send(page, memo)
    result["not_paired"] = wait_state(page, "not_paired")
    link = ask("pairing-link")
    page.evaluate("(i => (i.value = '', i.focus()))(document.getElementById('pc-i'))")
    page.send("Input.insertText", {"text": " " + link + "\n"})
    tap(page, "#pc-b")
    result["paired"] = wait_state(page, "paired")
    result["delivered_in"] = wait_outbox_empty(page)
    time.sleep(0.5)  # a second POST of the memo would show up
    result["pair_requests"] = statuses(requests_to(page, "POST", "/pair"))
    result["send_requests"] = statuses(requests_to(page, "POST", "/send"))


def scenario_revoked(tabs, args, result):
    token = ask("pairing-token")
    page = tabs.open("phone")
    open_page(page, lang_url(args) + "#pair=" + token)
    result["paired"] = wait_state(page, "paired")
    ask("revoke")
    memos = [memo_text("revoked one"), memo_text("revoked two")]
    result["memos"] = memos
    type_and_tap_send(page, memos[0])
    result["revoked"] = wait_state(page, "device_revoked")
    type_and_tap_send(page, memos[1])
    time.sleep(2)  # a retry would show up
    result["revoked_later"] = state(page)
    result["sends_while_revoked"] = statuses(requests_to(page, "POST", "/send"))
    # Told to pair again, the person types a code, wrongly: that is what the page must say, and keep
    # saying (it was replaced at once by "this phone was unpaired").
    type_code(page, "ZZZZ-ZZZZ\n")
    result["revoked_wrong"] = wait_state(page, "code_invalid")
    time.sleep(2)  # the check after the attempt would have replaced it by now
    result["revoked_wrong_later"] = state(page)

    again = ask("pairing-token")
    page.evaluate("window.__sameDocument = 1")
    sends = len(requests_to(page, "POST", "/send"))
    since = page.evaluate("Math.round(performance.now())")
    started = time.monotonic()
    page.evaluate("location.hash = '#pair=' + %s" % json.dumps(again))
    try:
        page.wait_for("window.__phone.states.some(s => s.code === 'paired' && s.at >= %d)" % since, timeout=15)
    except cdp.CDPError:
        pass
    emptied = wait_outbox_empty(page)
    result["seconds_to_delivered"] = None if emptied is None else round(time.monotonic() - started, 2)
    time.sleep(0.5)
    result["settled"] = state(page)
    result["sends_after_pairing"] = statuses(requests_to(page, "POST", "/send")[sends:])


def scenario_new_tab(tabs, args, result):
    old = tabs.open("old-tab")
    open_page(old, lang_url(args))
    memo = memo_text("old tab")
    result["memo"] = memo
    type_and_tap_send(old, memo)
    result["old_not_paired"] = wait_state(old, "not_paired")
    # The camera app opens the link in a new tab of the same browser; the old tab goes to the back.
    token = ask("pairing-token")
    new = tabs.open("new-tab")
    open_page(new, lang_url(args) + "#pair=" + token)
    result["new_paired"] = wait_state(new, "paired")
    result["seconds_to_delivered"] = wait_outbox_empty(new)
    result["old_hidden"] = old.evaluate("document.visibilityState")
    # Back to the old tab.
    old.show()
    try:
        old.wait_for("document.visibilityState === 'visible'"
                     " && document.getElementById('state').dataset.s === 'paired'", timeout=10)
    except cdp.CDPError:
        pass
    time.sleep(0.5)  # a late send from either tab would show up
    result["old_back"] = state(old)
    result["sends"] = [{"tab": p.name, "status": r["status"]}
                       for p in (old, new) for r in requests_to(p, "POST", "/send")]


def open_pairing_dialog(tabs, args, result):
    """The computer's page with 'Pair a phone' clicked; `before` is its state until then."""
    page = tabs.open("computer", phone=False)
    open_page(page, lang_url(args))
    try:
        page.wait_for("!document.getElementById('pair-open').hidden", timeout=15)
    except cdp.CDPError:
        pass
    result["before"] = state(page)
    page.click(*page.center_of("#pair-open"))
    return page


def scenario_computer(tabs, args, result):
    page = open_pairing_dialog(tabs, args, result)
    link = r"""({open: document.getElementById('pairing').open, svg: !!document.querySelector('#qr svg'),
                 url: document.getElementById('pair-url').textContent,
                 valid: document.getElementById('pair-valid').textContent,
                 code: document.getElementById('pair-code').textContent})"""
    try:
        page.wait_for("document.getElementById('pair-url').textContent !== ''", timeout=15)
    except cdp.CDPError:
        pass
    result["link"] = page.evaluate(link)
    result["link"]["qr_png"] = qr_screenshot(page, args, "pair-qr-1.png")
    screenshot(page, args, "computer-pair-dialog-%s.png" % args.lang)
    first = result["link"]["url"]
    page.click(*page.center_of("#pair-new"))
    try:
        page.wait_for("document.getElementById('pair-url').textContent !== %s" % json.dumps(first), timeout=15)
    except cdp.CDPError:
        pass
    result["new_link"] = page.evaluate(link)
    result["new_link"]["qr_png"] = qr_screenshot(page, args, "pair-qr-2.png")
    result["link_requests"] = statuses(requests_to(page, "POST", "/pair/link"))
    # A narrow window (or Jotter running on a phone or tablet itself): the footer, with 'Pair a
    # phone' in it, in every language.
    languages = page.evaluate("[...document.getElementById('lang').options].map(o => o.value)")
    width = PHONE_SIZE[0]
    page.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 800, "deviceScaleFactor": 1,
                                                     "mobile": False})
    result["narrow"] = []
    for tag in languages:
        open_page(page, args.url + "?lang=" + tag)
        try:
            page.wait_for("!document.getElementById('pair-open').hidden", timeout=10)
        except cdp.CDPError:
            pass
        layout = dict(page.evaluate(LAYOUT), screen_width=width, lang=tag)
        result["narrow"].append(layout)
        if tag in ("ja", "fr", "ar"):
            screenshot(page, args, "computer-narrow-%s.png" % tag)


def scenario_renewal(tabs, args, result):
    """The computer's 'Pair a phone' left open past its link's life: the link on screen is renewed."""
    page = open_pairing_dialog(tabs, args, result)
    try:
        page.wait_for("document.getElementById('pair-url').textContent !== ''", timeout=15)
    except cdp.CDPError:
        pass
    first = page.evaluate("document.getElementById('pair-url').textContent")
    result["first"] = first
    try:
        page.wait_for("document.getElementById('pair-url').textContent !== %s" % json.dumps(first), timeout=30)
    except cdp.CDPError:
        pass
    result["renewed"] = page.evaluate("document.getElementById('pair-url').textContent")
    result["open"] = page.evaluate("document.getElementById('pairing').open")
    result["link_requests"] = statuses(requests_to(page, "POST", "/pair/link"))


def qr_screenshot(page, args, name):
    """The QR code as the screen shows it, with a white margin around it (None without an SVG)."""
    box = page.evaluate("(s => s && (r => ({x: r.x + scrollX, y: r.y + scrollY, width: r.width,"
                        " height: r.height}))(s.getBoundingClientRect()))(document.querySelector('#qr svg'))")
    if not box:
        return None
    return screenshot(page, args, name, clip=box)


def scenario_local(tabs, args, result):
    page = tabs.open("phone")
    open_page(page, lang_url(args) + "#pair=" + secrets.token_urlsafe(32))
    result["loaded"] = state(page)
    memo = memo_text("local")
    result["memo"] = memo
    type_and_tap_send(page, memo)
    result["seconds_to_delivered"] = wait_outbox_empty(page)
    tap(page, "#history-open")
    try:
        page.wait_for("document.querySelectorAll('#history-list li').length > 0", timeout=15)
    except cdp.CDPError:
        pass
    result["history_items"] = page.evaluate("document.querySelectorAll('#history-list li').length")
    tap(page, "#history-close")
    page.wait_for("!document.getElementById('history').open", timeout=10)
    page.evaluate("location.hash = '#pair=' + %s" % json.dumps(secrets.token_urlsafe(32)))
    page.wait_for("window.__phone.hashchanges > 0", timeout=10)
    time.sleep(1)  # a pairing request, if the page made one, would show up
    result["settled"] = state(page)


def scenario_draft(tabs, args, result):
    page = tabs.open("phone")
    open_page(page, lang_url(args))
    subject, memo = "Draft %s" % secrets.token_hex(3), "Half a thought %s" % secrets.token_hex(3)
    result["subject"], result["memo"] = subject, memo
    tap(page, "#subject")
    page.type_text(subject)
    tap(page, "#body")
    page.type_text(memo)
    result["typed"] = state(page)
    page.reload()
    page.wait_for("!document.getElementById('foot').hidden", timeout=15)
    result["reloaded"] = state(page)
    tap(page, "#send")
    result["seconds_to_delivered"] = wait_outbox_empty(page)
    result["sent"] = state(page)
    page.reload()
    page.wait_for("!document.getElementById('foot').hidden", timeout=15)
    result["reloaded_after_send"] = state(page)


SCENARIOS = {
    "unpaired": scenario_unpaired,
    "links": scenario_links,
    "revoked": scenario_revoked,
    "new-tab": scenario_new_tab,
    "computer": scenario_computer,
    "renewal": scenario_renewal,
    "local": scenario_local,
    "draft": scenario_draft,
    "code": scenario_code,
    "paste": scenario_paste,
}

if __name__ == "__main__":
    sys.exit(main())
