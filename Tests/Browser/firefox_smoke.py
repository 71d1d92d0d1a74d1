#!/usr/bin/python3
"""Smoke test of Jotter's page in Firefox ESR, driven over Marionette; prints one JSON object.

    /usr/bin/python3 Tests/Browser/firefox_smoke.py --url http://127.0.0.1:PORT [--maildir PATH]

Load, focused, type, send, delivered once: the same scenario as webkit_smoke.py, which imports the
scenario, the probes and the sinkhole from here (only the transport differs). Standard library only.
As page_test.py, the driver observes and does not judge: it exits 0 whenever it could run, and
Tests/JotterTests/EngineSmokeTests.swift asserts. If the run broke, "error" says why.

Marionette (https://firefox-source-docs.mozilla.org/testing/marionette/Protocol.html) is Firefox's
own remote protocol: plain TCP, each message `LENGTH:JSON` (LENGTH in bytes), the server speaks first
({"marionetteProtocol": 3}); a command is [0, id, name, params], its answer [1, id, error, result].
The commands are WebDriver's under a `WebDriver:` prefix, with the capabilities given flat.

The browser: `firefox-esr --headless --marionette` with a fresh profile whose user.js turns off every
feature that reaches the network on its own (updates, telemetry, studies, Safe Browsing, captive
portal and connectivity checks, remote settings, new-tab content) and sends what is left to a
sinkhole proxy on 127.0.0.1, which answers 403 and records it: the browser contacts nothing but
127.0.0.1, and any attempt shows up in "foreign_requests". Marionette listens on port 0 (a free one)
and writes the port it got to MarionetteActivePort in the profile. Firefox runs in its own process
group, which is SIGTERMed (then SIGKILLed) at the end.

Observations (the names BrowserTests.expectClean reads are kept):
  at_load          right after WebDriver:Navigate returned (the load event): activeElement, readyState,
                   ms_after_load
  early            keys typed at once after that (the page's script may not have started yet):
                   where they went (textarea value, activeElement)
  ready            the page's script has started (footer shown), ms after the load event
  typed            the state once the whole memo is typed
  after_keydown    right after Ctrl+Enter was dispatched; probe.sends[0].sameTask: the page's state
                   seen by a bubbling keydown listener on window (same task as the page's handler)
  settled          once the page's outbox is empty (or the deadline passed)
  send_requests    the page's fetch() calls to /send: method, Idempotency-Key, status
  requests         every URL the page loaded (Resource Timing: navigation and resources)
  foreign_requests those not to the page's origin, plus whatever reached the sinkhole proxy
  problems         console_errors / exceptions seen by the probe after load, log_errors: failed
                   loads (status >= 400) and the browser's own output lines about the page's origin
                   (both Firefox only: WebKit reports no status in Resource Timing and no console)
  maildir          with --maildir: subject and body of every delivered message
  seconds          browser start, navigation, the whole run

"Right after load" is the first command after the navigation returned: in both engines that comes
after the page's first frame (measured: 25-280 ms after the load event). It cannot see a gap between
the load event and the first frame, where WebKit applies `autofocus`; only a script that runs before
the page's own (WebDriver BiDi's preload scripts, or CDP as in page_test.py) could.
"""
import argparse
import email
import email.policy
import json
import os
import secrets
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

FIREFOX = "/usr/bin/firefox-esr"

# WebDriver key codes (https://w3c.github.io/webdriver/#keyboard-actions).
CONTROL = "\ue009"
ENTER = "\ue007"

# Everything that would reach the network by itself, off. `%(proxy)d` is the sinkhole's port.
PREFS = {
    "marionette.port": 0,
    # No first-run, welcome, what's-new or default-browser pages; a blank start.
    "browser.shell.checkDefaultBrowser": False,
    "browser.startup.page": 0,
    "browser.startup.homepage": "about:blank",
    "browser.startup.homepage_override.mstone": "ignore",
    "browser.startup.firstrunSkipsHomepage": True,
    "startup.homepage_welcome_url": "about:blank",
    "startup.homepage_welcome_url.additional": "",
    "browser.aboutwelcome.enabled": False,
    "browser.sessionstore.resume_from_crash": False,
    "browser.tabs.warnOnClose": False,
    "browser.warnOnQuit": False,
    "termsofuse.bypassNotification": True,
    "datareporting.policy.firstRunURL": "",
    "datareporting.policy.dataSubmissionPolicyBypassNotification": True,
    # New tab page and its feeds.
    "browser.newtabpage.enabled": False,
    "browser.newtab.preload": False,
    "browser.newtabpage.activity-stream.default.sites": "",
    "browser.newtabpage.activity-stream.feeds.system.topstories": False,
    "browser.newtabpage.activity-stream.feeds.section.topstories": False,
    "browser.newtabpage.activity-stream.feeds.telemetry": False,
    "browser.newtabpage.activity-stream.telemetry": False,
    "browser.newtabpage.activity-stream.showSponsored": False,
    "browser.newtabpage.activity-stream.showSponsoredTopSites": False,
    "browser.topsites.contile.enabled": False,
    # Updates of the browser, add-ons, search engines, system add-ons, plugins (GMP).
    "app.update.enabled": False,
    "app.update.auto": False,
    "app.update.disabledForTesting": True,
    "app.update.checkInstallTime": False,
    "extensions.update.enabled": False,
    "extensions.update.autoUpdateDefault": False,
    "extensions.update.notifyUser": False,
    "extensions.getAddons.cache.enabled": False,
    "extensions.getAddons.showPane": False,
    "extensions.htmlaboutaddons.recommendations.enabled": False,
    "extensions.systemAddon.update.enabled": False,
    "extensions.blocklist.enabled": False,
    "extensions.pocket.enabled": False,
    "extensions.formautofill.addresses.enabled": False,
    "extensions.formautofill.creditCards.enabled": False,
    "browser.search.update": False,
    "browser.region.network.url": "",
    "browser.region.update.enabled": False,
    "media.gmp-manager.url": "",
    "media.gmp-manager.chromium-update-url": "",
    "media.gmp-provider.enabled": False,
    "media.gmp-widevinecdm.allow-chromium-update": False,
    "media.gmp-gmpopenh264.enabled": False,
    "media.gmp-widevinecdm.enabled": False,
    # Telemetry, health report, studies, experiments, remote settings.
    "datareporting.healthreport.uploadEnabled": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "datareporting.usage.uploadEnabled": False,
    "toolkit.telemetry.enabled": False,
    "toolkit.telemetry.unified": False,
    "toolkit.telemetry.archive.enabled": False,
    "toolkit.telemetry.server": "",
    "toolkit.telemetry.newProfilePing.enabled": False,
    "toolkit.telemetry.shutdownPingSender.enabled": False,
    "toolkit.telemetry.firstShutdownPing.enabled": False,
    "toolkit.telemetry.updatePing.enabled": False,
    "toolkit.telemetry.bhrPing.enabled": False,
    "toolkit.coverage.endpoint.base": "",
    "browser.ping-centre.telemetry": False,
    "app.normandy.enabled": False,
    "app.normandy.api_url": "",
    "app.shield.optoutstudies.enabled": False,
    "messaging-system.rsexperimentloader.enabled": False,
    "services.settings.server": "data:,#remote-settings-dummy/v1",
    "security.remote_settings.crlite_filters.enabled": False,
    "security.remote_settings.intermediates.enabled": False,
    "browser.crashReports.unsubmittedCheck.autoSubmit2": False,
    "browser.tabs.crashReporting.sendReport": False,
    # Safe Browsing and tracking-protection list downloads.
    "browser.safebrowsing.malware.enabled": False,
    "browser.safebrowsing.phishing.enabled": False,
    "browser.safebrowsing.blockedURIs.enabled": False,
    "browser.safebrowsing.downloads.enabled": False,
    "browser.safebrowsing.downloads.remote.enabled": False,
    "browser.safebrowsing.provider.google4.updateURL": "",
    "browser.safebrowsing.provider.google4.gethashURL": "",
    "browser.safebrowsing.provider.google.updateURL": "",
    "browser.safebrowsing.provider.google.gethashURL": "",
    "browser.safebrowsing.provider.mozilla.updateURL": "",
    "browser.safebrowsing.provider.mozilla.gethashURL": "",
    "privacy.trackingprotection.enabled": False,
    # Checks and guesses: captive portal, connectivity, DNS over HTTPS, prefetch, speculative connects.
    "network.captive-portal-service.enabled": False,
    "captivedetect.canonicalURL": "",
    "network.connectivity-service.enabled": False,
    "network.trr.mode": 5,
    "network.dns.disablePrefetch": True,
    "network.prefetch-next": False,
    "network.predictor.enabled": False,
    "network.http.speculative-parallel-limit": 0,
    "browser.urlbar.speculativeConnect.enabled": False,
    "browser.places.speculativeConnect.enabled": False,
    "network.sntp.pools": "",
    "security.OCSP.enabled": 0,
    # Other services.
    "dom.push.enabled": False,
    "dom.push.connection.enabled": False,
    "geo.enabled": False,
    "geo.provider.network.url": "",
    "identity.fxaccounts.enabled": False,
    "browser.discovery.enabled": False,
    "browser.translations.enable": False,
    "browser.ml.enable": False,
    "browser.urlbar.quicksuggest.enabled": False,
    "browser.urlbar.suggest.searches": False,
    "browser.urlbar.merino.endpointURL": "",
    "browser.uitour.enabled": False,
    "browser.vpn_promo.enabled": False,
    "signon.rememberSignons": False,
    # Whatever is left goes to the sinkhole; 127.0.0.1 (the page) is never proxied, and a failing
    # proxy must not fall back to a direct connection.
    "network.proxy.type": 1,
    "network.proxy.http": "127.0.0.1",
    "network.proxy.http_port": "%(proxy)d",
    "network.proxy.ssl": "127.0.0.1",
    "network.proxy.ssl_port": "%(proxy)d",
    "network.proxy.share_proxy_settings": False,
    "network.proxy.no_proxies_on": "127.0.0.1, localhost",
    "network.proxy.allow_hijacking_localhost": False,
    "network.proxy.failover_direct": False,
    # The page's console messages on the browser's output, where log_errors looks.
    "devtools.console.stdout.content": True,
}

# Installed right after the load event (no driver here can run a script before the page's own).
# It wraps fetch (the page calls the global `fetch` at the time of each request), console.error, and
# listens for uncaught errors. For Ctrl+Enter: a capturing keydown listener on window runs before the
# page's handler (on the form), a bubbling one after it, still in the same task.
PROBE = r"""
(() => {
  if (window.__smoke) return;
  const probe = window.__smoke = { fetches: [], sends: [], console_errors: [], exceptions: [] };
  const original = window.fetch;
  window.fetch = function (input, init) {
    const headers = (init && init.headers) || {};
    const entry = { url: new URL(typeof input === 'string' ? input : input.url, location.href).href,
                    method: (init && init.method) || 'GET',
                    idempotency_key: headers['Idempotency-Key'] || null, status: null };
    probe.fetches.push(entry);
    return original.call(window, input, init).then(
      r => { entry.status = r.status; return r; },
      e => { entry.error = String(e); throw e; });
  };
  const consoleError = console.error;
  console.error = function (...args) { probe.console_errors.push(args.map(String).join(' '));
                                       return consoleError.apply(this, args); };
  addEventListener('error', e => probe.exceptions.push(String(e.message || e)));
  addEventListener('unhandledrejection', e => probe.exceptions.push('unhandled rejection: ' + String(e.reason)));
  const state = () => { const t = document.getElementById('body');
                        return { empty: t.value === '', focused: document.activeElement === t }; };
  const isSend = e => e.key === 'Enter' && (e.ctrlKey || e.metaKey);
  addEventListener('keydown', e => {
    if (isSend(e)) probe.sends.push({ valueBefore: document.getElementById('body').value });
  }, true);
  addEventListener('keydown', e => {
    const send = probe.sends[probe.sends.length - 1];
    if (isSend(e) && send && !send.sameTask) { send.sameTask = state(); send.defaultPrevented = e.defaultPrevented; }
  }, false);
})();
"""

SINCE_LOAD = "(performance.now() - performance.getEntriesByType('navigation')[0].loadEventEnd)"

AT_LOAD = """
return { active: document.activeElement ? (document.activeElement.id || document.activeElement.tagName) : null,
         ready_state: document.readyState, title: document.title,
         has_textarea: !!document.getElementById('body'), ms_after_load: %s };
""" % SINCE_LOAD

STATE = """
const t = document.getElementById('body');
let outbox = null;
try {   // one key per unsent memo (jotter.outbox.ID)
  outbox = Object.keys(localStorage).filter(k => k.startsWith('jotter.outbox.')).map(k => JSON.parse(localStorage.getItem(k)));
} catch (e) { outbox = 'unreadable: ' + e; }
return { body: t ? t.value : null,
         active: document.activeElement ? (document.activeElement.id || document.activeElement.tagName) : null,
         outbox: outbox, ms_after_load: %s, probe: window.__smoke || null };
""" % SINCE_LOAD

READY = "return !document.getElementById('foot').hidden"

SETTLED = """
const s = window.__smoke;
return !Object.keys(localStorage).some(k => k.startsWith('jotter.outbox')) && s.fetches.some(f => f.url.endsWith('/send') && f.status !== null);
"""

RESOURCES = """
return performance.getEntries().filter(e => e.entryType === 'navigation' || e.entryType === 'resource')
  .map(e => ({ url: e.name, type: e.initiatorType || e.entryType,
               status: typeof e.responseStatus === 'number' ? e.responseStatus : null }));
"""


class Sinkhole(socketserver.ThreadingTCPServer):
    """An HTTP proxy on 127.0.0.1 that forwards nothing: it records each request's first line (for
    CONNECT, the host and port) and answers 403."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        self.seen = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), SinkholeHandler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def requests(self):
        with self.lock:
            return list(self.seen)

    def close(self):
        self.shutdown()
        self.server_close()


class SinkholeHandler(socketserver.StreamRequestHandler):
    timeout = 5

    def handle(self):
        try:
            line = self.rfile.readline(2048).decode("latin-1").strip()
        except OSError:
            line = ""
        with self.server.lock:
            self.server.seen.append("proxy: " + (line[:200] or "(connection without a request)"))
        try:
            self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        except OSError:
            pass


class DriverError(Exception):
    """The browser answered with an error, went away, or a wait ran out."""


class Marionette:
    """One Marionette connection: `command(name, params)` returns the result or raises DriverError."""

    def __init__(self, port, timeout):
        # Longer than any timeout given to the browser, so its own error comes first.
        self.socket = socket.create_connection(("127.0.0.1", port), timeout=timeout + 30)
        self.reader = self.socket.makefile("rb")
        self.next_id = 0
        hello = self._read()
        if hello.get("marionetteProtocol") != 3:
            raise DriverError("unexpected Marionette greeting: %r" % hello)

    def _read(self):
        length = b""
        while not length.endswith(b":"):
            byte = self.reader.read(1)
            if not byte:
                raise DriverError("Marionette closed the connection")
            length += byte
        data = self.reader.read(int(length[:-1]))
        return json.loads(data)

    def command(self, name, params=None):
        self.next_id += 1
        data = json.dumps([0, self.next_id, name, params or {}]).encode()
        self.socket.sendall(b"%d:%s" % (len(data), data))
        while True:
            kind, number, error, result = self._read()
            if kind == 1 and number == self.next_id:
                break
        if error:
            raise DriverError("%s: %s: %s" % (name, error.get("error"), error.get("message")))
        return result

    def close(self):
        try:
            self.socket.close()
        except OSError:
            pass


class FirefoxSession:
    """Firefox in its own process group, a fresh profile and a Marionette session; the calls the
    scenario needs."""

    engine = "firefox"

    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="jotter-firefox-")
        self.output_path = os.path.join(self.profile, "output.log")
        self.output = open(self.output_path, "wb")
        self.process = self.client = None
        self.version = None

    def start(self, proxy_port, timeout):
        with open(os.path.join(self.profile, "user.js"), "w") as f:
            for name, value in PREFS.items():
                if value == "%(proxy)d":
                    value = proxy_port
                f.write("user_pref(%s, %s);\n" % (json.dumps(name), json.dumps(value)))
        # MOZ_DISABLE_NONLOCAL_CONNECTIONS: Firefox refuses every connection to an address other than
        # loopback (the proxy is on loopback, so attempts are still recorded), and, as under test,
        # honours services.settings.server (a release build ignores it otherwise).
        env = dict(os.environ, MOZ_CRASHREPORTER_DISABLE="1", MOZ_HEADLESS="1", MOZ_DISABLE_NONLOCAL_CONNECTIONS="1")
        self.process = subprocess.Popen(
            [FIREFOX, "--headless", "--marionette", "--no-remote", "--new-instance", "--profile", self.profile,
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.output, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        port = self._wait_for_port(timeout)
        self.client = Marionette(port, timeout)
        capabilities = self.client.command("WebDriver:NewSession", {
            "pageLoadStrategy": "normal", "timeouts": {"pageLoad": int(timeout * 1000), "script": 30000},
        })["capabilities"]
        self.version = "firefox %s" % capabilities.get("browserVersion")

    def _wait_for_port(self, timeout):
        path = os.path.join(self.profile, "MarionetteActivePort")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise DriverError("firefox exited (%s) before Marionette listened" % self.process.returncode)
            try:
                with open(path) as f:
                    text = f.read().strip()
                if text:
                    return int(text)
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.05)
        raise DriverError("Marionette did not listen within %.0f s" % timeout)

    def navigate(self, url):
        self.client.command("WebDriver:Navigate", {"url": url})

    def execute(self, script):
        return self.client.command("WebDriver:ExecuteScript", {"script": script, "args": []}).get("value")

    def perform(self, actions):
        self.client.command("WebDriver:PerformActions", {"actions": [
            {"type": "key", "id": "keyboard", "actions": actions}]})
        self.client.command("WebDriver:ReleaseActions")

    def output_tail(self, limit=3000):
        try:
            with open(self.output_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-limit:]
        except OSError:
            return ""

    def output_lines(self):
        try:
            with open(self.output_path, "rb") as f:
                return f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return []

    def close(self):
        """Quits Firefox (Marionette:Quit), then makes sure its whole process group is gone."""
        if self.client is not None:
            try:
                self.client.socket.settimeout(10)
                self.client.command("Marionette:Quit", {"flags": ["eForceQuit"]})
            except (DriverError, OSError, ValueError):
                pass
            self.client.close()
        if self.process is not None:
            stop_group(self.process)
        self.output.close()
        shutil.rmtree(self.profile, ignore_errors=True)


def stop_group(process, wait=10, grace=5):
    """Waits up to `wait` seconds for the process to exit by itself, SIGTERMs its process group and
    gives it `grace` seconds, then SIGKILLs what is left."""
    try:
        process.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            process.poll()  # reap the leader, or the group never looks empty
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            continue
        break
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass


# -- the scenario (shared with webkit_smoke.py) --------------------------------------------------------


def keys(text):
    """Key actions that type `text` (a newline is the Enter key)."""
    actions = []
    for char in text:
        key = ENTER if char == "\n" else char
        actions += [{"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]
    return actions


def ctrl_enter():
    return [{"type": "keyDown", "value": CONTROL}, {"type": "keyDown", "value": ENTER},
            {"type": "keyUp", "value": ENTER}, {"type": "keyUp", "value": CONTROL}]


def wait_for(session, script, timeout, interval=0.05):
    """Runs `script` until it returns something true; returns it, or raises DriverError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = session.execute(script)
        if value:
            return value
        if time.monotonic() >= deadline:
            raise DriverError("still false after %.0f s: %s" % (timeout, script.strip()))
        time.sleep(interval)


def scenario(session, url, result, timeout):
    """Cold start: load, keys typed at once, the rest of the memo, Ctrl+Enter, settle."""
    early, rest = "Buy oat milk", "\nand bread %s" % secrets.token_hex(4)
    result["memo"] = early + rest
    result["early_text"] = early
    started = time.monotonic()
    session.navigate(url)
    result["seconds"]["navigate"] = round(time.monotonic() - started, 2)
    # The first commands after the load event: where is the focus, and where do keys go?
    result["at_load"] = session.execute(AT_LOAD)
    session.perform(keys(early))
    result["early"] = session.execute(STATE)
    # The page's script starts after its first paint and an idle moment; Ctrl+Enter needs it.
    wait_for(session, READY, timeout)
    result["ready"] = {"ms_after_load": session.execute("return " + SINCE_LOAD)}
    session.execute(PROBE)
    session.perform(keys(rest))
    result["typed"] = session.execute(STATE)
    session.perform(ctrl_enter())
    result["after_keydown"] = session.execute(STATE)
    try:
        wait_for(session, SETTLED, timeout)
    except DriverError as error:
        result["settle_error"] = str(error)
    # A second POST, if the page sent one, would go out at once: look again a moment later.
    time.sleep(0.3)
    result["settled"] = session.execute(STATE)
    result["send_requests"] = [f for f in (result["settled"]["probe"] or {}).get("fetches", [])
                               if f["url"].split("?")[0].endswith("/send")]


def run(make_session, description):
    """Parses the arguments, runs the scenario in `make_session()` (started with the sinkhole's port
    and a timeout per step), closes it whatever happened, and prints the observations."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", required=True, help="the page, e.g. http://127.0.0.1:7373")
    parser.add_argument("--scenario", default="smoke", choices=["smoke"])
    parser.add_argument("--maildir", help="the server's Maildir: report what was delivered")
    parser.add_argument("--timeout", type=float, default=120, help="hard limit for the whole run, seconds")
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
    result = {"scenario": args.scenario, "url": url, "origin": origin, "error": None, "seconds": {}}
    started = time.monotonic()
    sinkhole = Sinkhole()
    session = make_session()
    result["engine"] = session.engine
    # Each wait inside the scenario gets a share of the whole budget.
    step_timeout = max(10.0, args.timeout / 4)
    try:
        session.start(sinkhole.port, step_timeout)
        result["browser"] = session.version
        result["seconds"]["browser_start"] = round(time.monotonic() - started, 2)
        scenario(session, url, result, step_timeout)
    except BaseException as error:  # also the signals above: report, then clean up
        result["error"] = "%s: %s" % (type(error).__name__, error)
        # The browser's last words, where the test's failure message shows them.
        result["browser_output"] = session.output_tail()
        if result["browser_output"]:
            result["error"] += " | browser output: " + result["browser_output"][-1500:]
    finally:
        signal.alarm(0)
        # Cleaning up is not interrupted by a second SIGTERM; SIGALRM still bounds it.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            signal.alarm(30)
            if session.version is not None:
                observe_page(session, origin, result)
        except BaseException as error:
            result.setdefault("observe_error", "%s: %s" % (type(error).__name__, error))
        finally:
            signal.alarm(0)
        try:
            signal.alarm(60)
            session.close()
        except BaseException as error:
            result["close_error"] = "%s: %s" % (type(error).__name__, error)
        finally:
            signal.alarm(0)
        result["foreign_requests"] = result.get("foreign_requests", []) + sinkhole.requests()
        sinkhole.close()
    if args.maildir:
        result["maildir"] = read_maildir(args.maildir)
    result["seconds"]["total"] = round(time.monotonic() - started, 2)
    print(json.dumps(result, ensure_ascii=False), flush=True)
    return 0


def observe_page(session, origin, result):
    """What the page loaded and what went wrong in it, while the session is still open."""
    probe = {}
    try:
        resources = session.execute(RESOURCES) or []
        probe = session.execute("return window.__smoke || {}") or {}
    except DriverError as error:
        resources = []
        result["observe_error"] = str(error)
    result["requests"] = resources
    result["foreign_requests"] = [r["url"] for r in resources if not same_origin(r["url"], origin)]
    failed = ["%s %s" % (r["status"], r["url"]) for r in resources if (r.get("status") or 0) >= 400]
    # The browser's own lines about the page (console messages, script errors, blocked loads).
    mentioned = [line for line in session.output_lines() if origin in line]
    result["problems"] = {"console_errors": probe.get("console_errors", []),
                          "exceptions": probe.get("exceptions", []),
                          "log_errors": failed + mentioned}


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


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    sys.exit(run(FirefoxSession, __doc__.split("\n\n")[0]))
