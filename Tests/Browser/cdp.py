"""A small Chrome DevTools Protocol client: Debian's Chromium over --remote-debugging-pipe.

Standard library only: no websocket library, no driver download. Chromium reads commands from its
fd 3 and writes answers and events to its fd 4, each message one JSON text ended by a NUL byte
(https://chromedevtools.github.io/devtools-protocol/, "--remote-debugging-pipe").

    with Browser() as browser:          # headless, fresh --user-data-dir, own process group
        page = browser.new_page()       # a tab, attached in "flatten" mode (one session id)
        page.navigate("http://127.0.0.1:8080/")
        page.wait_for_paint()           # keys sent before the first paint are dropped by Chromium
        page.type_text("buy milk")
        page.press_ctrl_enter()
        page.evaluate("document.getElementById('body').value")

Everything the page does is recorded on the Page object while it is attached: every request URL
(Network domain), console errors, uncaught exceptions and browser log entries.

Hidden pages (for the privacy overlay): in this Chromium (156, new headless), tabs of one window
behave like a real browser's. Opening a second tab in the same window with Target.createTarget
(newWindow false, background false) makes the first tab's document.visibilityState "hidden" and fires
blur and visibilitychange; Target.activateTarget on the first tab makes it "visible" again and fires
focus and visibilitychange. Page.hide_by_other_tab and Page.show do exactly that; no synthetic event
and no overridden visibilityState is needed. Checked by `python3 cdp.py --self-test`.

The process: /usr/bin/chromium (Debian's launcher script, which execs the binary, keeping the pipe
fds) in a new session, so close() can SIGKILL the whole process group; Chromium also quits by itself
when the pipe closes (if the Python side dies). Its crashpad handler leaves the group but exits with
the browser.
"""
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

CHROMIUM = "/usr/bin/chromium"

# Flags for a quiet, reproducible, cold browser. --no-sandbox: CI runs as root, where Chromium's
# sandbox cannot start.
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-gpu",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--metrics-recording-only",
    "--disable-default-apps",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--no-pings",
    "--password-store=basic",
    "--use-mock-keychain",
    "--mute-audio",
    "--remote-debugging-pipe",
]


class CDPError(Exception):
    """An error answer from Chromium, a timeout, or the browser going away."""


class Browser:
    """One headless Chromium in its own process group, with a fresh profile unless one is given."""

    def __init__(self, user_data_dir=None, extra_flags=(), window_size=(1000, 700), timeout=15.0):
        self.timeout = timeout
        self._own_profile = user_data_dir is None
        self.user_data_dir = user_data_dir or tempfile.mkdtemp(prefix="jotter-chromium-")
        os.makedirs(self.user_data_dir, exist_ok=True)
        self._next_id = 0
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending = {}          # id -> [threading.Event, answer]
        self._sessions = {}         # session id -> Page
        self._browser_events = []   # events without a session
        self._closed = False
        self.stderr_path = os.path.join(self.user_data_dir, "chromium.stderr")

        # Our end writes to Chromium's fd 3, Chromium's fd 4 writes to our end. The child's ends are
        # moved to fds >= 10 first, so that putting them on 3 and 4 cannot overwrite one another.
        to_child_r, self._to_child = self._high_pipe(read_end_high=True)
        self._from_child, from_child_w = self._high_pipe(read_end_high=False)
        arguments = [CHROMIUM, *FLAGS, "--user-data-dir=" + self.user_data_dir,
                     "--window-size=%d,%d" % window_size, *extra_flags, "about:blank"]
        # bash puts the pipe ends on fds 3 and 4, then becomes Chromium (exec keeps the pid; Debian's
        # /usr/bin/chromium is a shell wrapper that execs the binary, which keeps them too).
        # start_new_session: Chromium and every helper it forks share one process group that
        # close() kills as a whole, also when a test fails half-way.
        script = 'exec "$@" 3<&%d 4>&%d %d<&- %d>&-' % (to_child_r, from_child_w, to_child_r, from_child_w)
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                ["/bin/bash", "-c", script, "bash", *arguments],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                pass_fds=(to_child_r, from_child_w), start_new_session=True)
        os.close(to_child_r)
        os.close(from_child_w)
        self._reader = threading.Thread(target=self._read_loop, name="cdp-reader", daemon=True)
        self._reader.start()
        try:
            self.version = self.send("Browser.getVersion")
        except Exception:
            self.close()
            raise

    @staticmethod
    def _high_pipe(read_end_high):
        """A pipe whose child-side end is moved to an fd >= 10 (close-on-exec; pass_fds opens it)."""
        read_end, write_end = os.pipe()
        if read_end_high:
            high = fcntl.fcntl(read_end, fcntl.F_DUPFD_CLOEXEC, 10)
            os.close(read_end)
            return high, write_end
        high = fcntl.fcntl(write_end, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(write_end)
        return read_end, high

    # -- transport -------------------------------------------------------------------------------

    def _read_loop(self):
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_child, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                try:
                    message = json.loads(raw)
                except ValueError:
                    continue
                self._dispatch(message)
        self._closed = True
        with self._lock:
            for waiter in self._pending.values():
                waiter[1] = {"error": {"message": "browser closed the pipe"}}
                waiter[0].set()

    def _dispatch(self, message):
        if "id" in message:
            with self._lock:
                waiter = self._pending.pop(message["id"], None)
            if waiter:
                waiter[1] = message
                waiter[0].set()
            return
        session = self._sessions.get(message.get("sessionId"))
        if session is not None:
            session._on_event(message["method"], message.get("params", {}))
        else:
            self._browser_events.append((time.monotonic(), message["method"], message.get("params", {})))

    def send(self, method, params=None, session_id=None, timeout=None):
        """Sends one command and waits for its answer; returns `result`, raises CDPError on `error`."""
        waiter = [threading.Event(), None]
        message_id = self._command(method, params, session_id, waiter)
        if not waiter[0].wait(timeout or self.timeout):
            with self._lock:
                self._pending.pop(message_id, None)
            raise CDPError("%s: no answer in %.1f s" % (method, timeout or self.timeout))
        answer = waiter[1]
        if "error" in answer:
            raise CDPError("%s: %s" % (method, answer["error"].get("message")))
        return answer.get("result", {})

    def _command(self, method, params, session_id, waiter=None):
        """Numbers a command, registers `waiter` for its answer (if any) and writes it; returns its id."""
        if self._closed:
            raise CDPError("browser is gone (%s)" % method)
        with self._lock:
            self._next_id += 1
            message_id = self._next_id
            if waiter is not None:
                self._pending[message_id] = waiter
        message = {"id": message_id, "method": method, "params": params or {}}
        if session_id:
            message["sessionId"] = session_id
        try:
            self._write(message)
        except OSError as error:
            with self._lock:
                self._pending.pop(message_id, None)
            raise CDPError("cannot write to the browser: %s" % error)
        return message_id

    def _write(self, message):
        """One whole message on the pipe (a lock keeps messages of several threads apart)."""
        data = json.dumps(message).encode() + b"\0"
        with self._write_lock:
            while data:
                data = data[os.write(self._to_child, data):]

    def post(self, method, params=None, session_id=None):
        """Sends one command without waiting for its answer (which is then dropped)."""
        self._command(method, params, session_id)

    # -- targets ---------------------------------------------------------------------------------

    def new_page(self, url="about:blank", new_window=False, background=False):
        """Opens a tab (in the existing window unless new_window) and attaches to it."""
        target = self.send("Target.createTarget", {"url": url, "newWindow": new_window, "background": background})
        return self.attach(target["targetId"])

    def attach(self, target_id):
        session = self.send("Target.attachToTarget", {"targetId": target_id, "flatten": True})["sessionId"]
        page = Page(self, target_id, session)
        self._sessions[session] = page
        page._enable()
        return page

    def pages(self):
        return [t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page"]

    # -- lifetime --------------------------------------------------------------------------------

    def close(self):
        """Asks Chromium to quit, then kills its whole process group; removes a profile we made."""
        if self.process.poll() is None and not self._closed:
            try:
                self.send("Browser.close", timeout=2)
            except CDPError:
                pass
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        kill_group(self.process.pid)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._own_profile:
            shutil.rmtree(self.user_data_dir, ignore_errors=True)

    def stderr_tail(self, limit=2000):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read()[-limit:].decode(errors="replace")
        except OSError:
            return ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def kill_group(pgid):
    """SIGKILL to every process still in the group (Chromium's renderers, GPU and utility processes)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Page:
    """One attached tab: commands go to its session, its events are recorded here."""

    def __init__(self, browser, target_id, session_id):
        self.browser = browser
        self.target_id = target_id
        self.session_id = session_id
        self.requests = []          # every request: {"url", "method", "type", "status"[, "headers"]}
        self._request_index = {}
        self.console_errors = []    # console.error / console.assert calls
        self.exceptions = []        # uncaught exceptions and unhandled rejections
        self.log_errors = []        # Log domain: failed loads (404, refused), CSP violations, interventions
        self.events = []            # (monotonic time, method, params) of everything else
        self._event_condition = threading.Condition()

    def send(self, method, params=None, timeout=None):
        return self.browser.send(method, params, session_id=self.session_id, timeout=timeout)

    def post(self, method, params=None):
        """Sends a command to this tab without waiting for the answer."""
        self.browser.post(method, params, session_id=self.session_id)

    def _enable(self):
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(domain + ".enable")
        self.send("Page.setLifecycleEventsEnabled", {"enabled": True})

    def _on_event(self, method, params):
        if method == "Network.requestWillBeSent":
            request = params["request"]
            if params.get("redirectResponse") and params["requestId"] in self._request_index:
                self._request_index[params["requestId"]]["status"] = params["redirectResponse"]["status"]
            entry = {"url": request["url"], "method": request["method"], "type": params.get("type"), "status": None}
            if request["method"] not in ("GET", "HEAD"):
                entry["headers"] = request.get("headers", {})
                entry["post_data"] = request.get("postData")
            self.requests.append(entry)
            self._request_index[params["requestId"]] = entry
        elif method == "Network.responseReceived":
            entry = self._request_index.get(params["requestId"])
            if entry is not None:
                entry["status"] = params["response"]["status"]
        elif method == "Network.loadingFailed":
            entry = self._request_index.get(params["requestId"])
            if entry is not None:
                entry["failed"] = params.get("errorText")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", []))
            self.console_errors.append({"type": params["type"], "text": text})
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            description = details.get("exception", {}).get("description") or details.get("text")
            self.exceptions.append({"text": description, "url": details.get("url")})
        elif method == "Log.entryAdded":
            entry = params["entry"]
            if entry.get("level") == "error":
                self.log_errors.append({"source": entry.get("source"), "text": entry.get("text"),
                                        "url": entry.get("url")})
        with self._event_condition:
            self.events.append((time.monotonic(), method, params))
            self._event_condition.notify_all()

    def _wait_until(self, find, timeout, what):
        """What `find()` returns once it is not None, re-asked after every event; raises after timeout."""
        deadline = time.monotonic() + timeout
        with self._event_condition:
            while True:
                found = find()
                if found is not None:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CDPError("no %s in %.1f s" % (what, timeout))
                self._event_condition.wait(remaining)

    def wait_event(self, method, predicate=lambda params: True, timeout=10.0, since=0):
        """The params of the first `method` event (at index >= since) for which predicate holds."""
        return self._wait_until(
            lambda: next((params for _, name, params in self.events[since:] if name == method and predicate(params)), None),
            timeout, "%s event" % method)

    def wait_for_response(self, predicate, timeout=10.0):
        """The first request for which predicate(entry) holds, once it has had its response (or failed)."""
        return self._wait_until(
            lambda: next((entry for entry in self.requests
                          if predicate(entry) and (entry["status"] is not None or "failed" in entry)), None),
            timeout, "response to the awaited request")

    def problems(self):
        """Console errors, exceptions and error log entries seen so far."""
        return {"console_errors": list(self.console_errors), "exceptions": list(self.exceptions),
                "log_errors": list(self.log_errors)}

    # -- navigation ------------------------------------------------------------------------------

    def navigate(self, url, wait="load", timeout=10.0):
        """Navigates the main frame; waits for `wait` ("load", "DOMContentLoaded", "commit" or None)."""
        since = len(self.events)
        result = self.send("Page.navigate", {"url": url}, timeout=timeout)
        if result.get("errorText"):
            raise CDPError("navigation to %s failed: %s" % (url, result["errorText"]))
        if wait:
            self.wait_lifecycle(wait, loader_id=result.get("loaderId"), since=since, timeout=timeout)
        return result

    def wait_lifecycle(self, name, loader_id=None, since=0, timeout=10.0):
        """Waits for Page.lifecycleEvent `name` of the main frame (of loader_id, when given)."""
        if name == "commit":
            name = "init"  # the first lifecycle event of a new document
        return self.wait_event(
            "Page.lifecycleEvent",
            lambda p: p["name"] == name and p["frameId"] == self.target_id
            and (loader_id is None or p["loaderId"] == loader_id),
            timeout=timeout, since=since)

    def wait_for_paint(self, since=0, timeout=10.0):
        """Waits for the main frame's "firstPaint" lifecycle event (at event index >= since).
        Chromium drops key input until a new page has painted, so typing right after "load" can
        lose the first keys. (Works with script execution disabled, unlike requestAnimationFrame.)"""
        return self.wait_lifecycle("firstPaint", since=since, timeout=timeout)

    def reload(self, wait="load", timeout=10.0):
        since = len(self.events)
        self.send("Page.reload", {"ignoreCache": False})
        if wait:
            self.wait_lifecycle(wait, since=since, timeout=timeout)

    def add_script_on_new_document(self, source):
        """Runs `source` in every new document before the page's own scripts (not subject to page CSP)."""
        return self.send("Page.addScriptToEvaluateOnNewDocument", {"source": source})["identifier"]

    # -- JavaScript ------------------------------------------------------------------------------

    def evaluate(self, expression, await_promise=True, timeout=10.0):
        """Evaluates `expression` in the page; returns its value (JSON-serialisable results only)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": await_promise,
                                                "returnByValue": True, "userGesture": False},
                           timeout=timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise CDPError("evaluate failed: %s" % (details.get("exception", {}).get("description")
                                                   or details.get("text")))
        return result["result"].get("value")

    def wait_for(self, expression, timeout=10.0, interval=0.02):
        """Polls `expression` until it is truthy; returns its value, or raises after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() >= deadline:
                raise CDPError("timed out waiting for: %s" % expression)
            time.sleep(interval)

    # -- DOM without JavaScript (for pages with script execution disabled) -----------------------

    def query(self, selector):
        root = self.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        node = self.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        if not node:
            raise CDPError("no element matches %s" % selector)
        return node

    def center_of(self, selector):
        """The centre of the element's border box, in CSS pixels of the viewport."""
        quad = self.send("DOM.getBoxModel", {"nodeId": self.query(selector)})["model"]["border"]
        return (sum(quad[0::2]) / 4, sum(quad[1::2]) / 4)

    def outer_html(self, selector):
        return self.send("DOM.getOuterHTML", {"nodeId": self.query(selector)})["outerHTML"]

    # -- input -----------------------------------------------------------------------------------

    @staticmethod
    def key_events(key, code=None, key_code=0, text=None, modifiers=0):
        """The Input.dispatchKeyEvent parameters of one key press: (keyDown, keyUp).

        modifiers: 1 Alt, 2 Ctrl, 4 Meta, 8 Shift.
        """
        down = {"type": "keyDown" if text else "rawKeyDown", "key": key, "code": code or "",
                "windowsVirtualKeyCode": key_code, "nativeVirtualKeyCode": key_code, "modifiers": modifiers}
        if text:
            down["text"] = down["unmodifiedText"] = text
        up = {"type": "keyUp", "key": key, "code": code or "", "windowsVirtualKeyCode": key_code,
              "nativeVirtualKeyCode": key_code, "modifiers": modifiers}
        return down, up

    def key(self, key, code=None, key_code=0, text=None, modifiers=0):
        """One real key press (keyDown with its text, then keyUp), as the OS would deliver it; each
        returns once the renderer has handled it."""
        for event in self.key_events(key, code, key_code, text, modifiers):
            self.send("Input.dispatchKeyEvent", event)

    def type_text(self, text):
        """Types `text` key by key (Enter for "\\n"); other characters as keyDown with their text."""
        for ch in text:
            if ch == "\n":
                self.key("Enter", "Enter", 13, text="\r")
            elif ch.isascii() and ch.isalnum():
                code = ("Key" + ch.upper()) if ch.isalpha() else ("Digit" + ch)
                self.key(ch, code, ord(ch.upper()), text=ch, modifiers=8 if ch.isupper() else 0)
            elif ch == " ":
                self.key(" ", "Space", 32, text=" ")
            else:
                self.key(ch, "", 0, text=ch)

    def press_ctrl_enter(self):
        """Ctrl+Enter: keyDown without text (a modified Enter inserts nothing), then keyUp."""
        self.key("Enter", "Enter", 13, modifiers=2)

    def click(self, x, y):
        """A real left click (mouse move, press, release) at viewport coordinates."""
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                   "buttons": 1 if kind == "mousePressed" else 0,
                                                   "clickCount": 1})

    # -- visibility ------------------------------------------------------------------------------

    def hide_by_other_tab(self):
        """Opens another tab in front in the same window: this one becomes hidden, as in a real
        browser. Returns the other tab's target id (close it with show())."""
        other = self.browser.send("Target.createTarget", {"url": "about:blank", "newWindow": False,
                                                         "background": False})["targetId"]
        self.browser.send("Target.activateTarget", {"targetId": other})
        return other

    def show(self, other_target_id=None):
        """Brings this tab to the front again (and closes the tab that hid it, when given)."""
        self.browser.send("Target.activateTarget", {"targetId": self.target_id})
        if other_target_id:
            self.browser.send("Target.closeTarget", {"targetId": other_target_id})


def _self_test():
    """Checks the mechanisms this client relies on against the installed Chromium."""
    with Browser() as browser:
        page = browser.new_page()
        since = len(page.events)
        page.navigate("data:text/html,<textarea autofocus></textarea>")
        page.wait_for_paint(since)
        page.type_text("Hi 1")
        page.press_ctrl_enter()
        value = page.evaluate("document.querySelector('textarea').value")
        state = page.evaluate("document.visibilityState")
        other = page.hide_by_other_tab()
        page.wait_for("document.visibilityState === 'hidden'", timeout=3)
        page.show(other)
        page.wait_for("document.visibilityState === 'visible'", timeout=3)
        print(json.dumps({"version": browser.version.get("product"), "typed": value, "visible_at_start": state,
                          "hide_and_show": "works"}))


if __name__ == "__main__":
    import sys
    if "--self-test" in sys.argv:
        _self_test()
