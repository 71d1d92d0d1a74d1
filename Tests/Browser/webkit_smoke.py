#!/usr/bin/python3
"""Smoke test of Jotter's page in WebKitGTK, driven over W3C WebDriver; prints one JSON object.

    /usr/bin/python3 Tests/Browser/webkit_smoke.py --url http://127.0.0.1:PORT [--maildir PATH]

The same scenario, probes, sinkhole proxy and observations as firefox_smoke.py (imported from there);
only the transport differs. Standard library only (urllib).

The browser: Debian's WebKitWebDriver (package webkit2gtk-driver) starts MiniBrowser, WebKitGTK's
test browser (shipped in libwebkit2gtk-4.1-0), in automation mode (`webkitgtk:browserOptions`).
MiniBrowser has no headless mode: the driver runs under `xvfb-run -a`, which starts a private X
server on a free display. MiniBrowser's proxy is the sinkhole (`--proxy`, 127.0.0.1 ignored).

Unlike Firefox, nothing reports the page's console messages or errors from before the probe is
installed (MiniBrowser's --enable-write-console-messages-to-stdout has no effect in automation mode);
a script that failed before start() shows as "ready" never coming.

The driver listens on a port picked by binding 127.0.0.1:0 first (retried if taken meanwhile);
xvfb-run, Xvfb, the driver and the browser's processes share one process group, SIGTERMed (then
SIGKILLed) at the end.
"""
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import firefox_smoke as smoke  # noqa: E402

DRIVER = "/usr/bin/WebKitWebDriver"


def minibrowser():
    """Debian's MiniBrowser, from the WebKitGTK that WebKitWebDriver belongs to (`dpkg -L libwebkit2gtk-4.1-0`)."""
    found = sorted(glob.glob("/usr/lib/*/webkit2gtk-4.*/MiniBrowser"))
    if not found:
        raise smoke.DriverError("no MiniBrowser under /usr/lib/*/webkit2gtk-4.*/ (apt-get install webkit2gtk-driver)")
    return found[-1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebKitSession:
    """WebKitWebDriver under xvfb-run in its own process group, and one WebDriver session."""

    engine = "webkit"

    def __init__(self):
        self.directory = tempfile.mkdtemp(prefix="jotter-webkit-")
        self.output_path = os.path.join(self.directory, "output.log")
        self.output = open(self.output_path, "wb")
        self.process = self.session = self.version = None
        self.timeout = 30

    def start(self, proxy_port, timeout):
        self.timeout = timeout
        binary = minibrowser()
        authority = os.path.join(self.directory, "Xauthority")
        open(authority, "a").close()  # as xvfb-run does for its own: xauth warns about a missing file
        # The port can be taken between the check and the driver's bind: then try another.
        for _ in range(3):
            self.port = free_port()
            # The X authority file in this session's own directory: xvfb-run would otherwise make a
            # directory in /tmp for it, which it removes only when it exits by itself, not when its
            # group is stopped (every run left one).
            self.process = subprocess.Popen(
                ["xvfb-run", "-a", "-f", authority,
                 "-s", "-screen 0 1280x1024x24 -nolisten tcp",
                 DRIVER, "--port=%d" % self.port, "--host=local"],
                stdin=subprocess.DEVNULL, stdout=self.output, stderr=subprocess.STDOUT, start_new_session=True)
            if self._wait_until_listening(timeout):
                break
            smoke.stop_group(self.process, wait=0)
        else:
            raise smoke.DriverError("WebKitWebDriver did not start: %s" % self.output_tail())
        answer = self._request("POST", "/session", {"capabilities": {"alwaysMatch": {
            "pageLoadStrategy": "normal",
            "timeouts": {"pageLoad": int(timeout * 1000), "script": 30000},
            "webkitgtk:browserOptions": {"binary": binary, "args": [
                "--automation",
                # --ignore-host takes one host per flag.
                "--proxy=http://127.0.0.1:%d" % proxy_port, "--ignore-host=127.0.0.1", "--ignore-host=localhost",
            ]},
        }}})
        self.session = answer["sessionId"]
        self.capabilities = answer.get("capabilities", {})
        self.version = "%s %s" % (self.capabilities.get("browserName"), self.capabilities.get("browserVersion"))

    def _wait_until_listening(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                if self._request("GET", "/status").get("ready") is not None:
                    return True
            except (OSError, smoke.DriverError):
                pass
            time.sleep(0.05)
        return False

    def _request(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=data, method=method,
                                         headers={"Content-Type": "application/json; charset=utf-8"})
        try:
            # Longer than any timeout given to the browser, so its own error comes first.
            with urllib.request.urlopen(request, timeout=self.timeout + 30) as response:
                answer = json.load(response)
        except urllib.error.HTTPError as error:
            try:
                value = json.load(error).get("value", {})
            except ValueError:
                value = {}
            raise smoke.DriverError("%s %s: %s %s: %s" % (method, path, error.code, value.get("error"),
                                                          value.get("message")))
        return answer.get("value") if isinstance(answer, dict) else answer

    def _command(self, method, path, body=None):
        return self._request(method, "/session/%s%s" % (self.session, path), body)

    def navigate(self, url):
        self._command("POST", "/url", {"url": url})

    def execute(self, script):
        return self._command("POST", "/execute/sync", {"script": script, "args": []})

    def perform(self, actions):
        self._command("POST", "/actions", {"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})
        self._command("DELETE", "/actions")

    def output_lines(self):
        try:
            with open(self.output_path, "rb") as f:
                return f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return []

    def output_tail(self, limit=3000):
        return "\n".join(self.output_lines())[-limit:]

    def close(self):
        """Ends the session (MiniBrowser quits), then makes sure the whole process group is gone."""
        if self.session is not None:
            try:
                self._command("DELETE", "")
            except (OSError, smoke.DriverError):
                pass
        if self.process is not None:
            # xvfb-run waits for the driver, which does not exit by itself: stop the group now.
            smoke.stop_group(self.process, wait=0)
        self.output.close()
        shutil.rmtree(self.directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(smoke.run(WebKitSession, __doc__.split("\n\n")[0]))
