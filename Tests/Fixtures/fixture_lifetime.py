"""What every helper program a test starts shares: it lives as long as the test holds its standard
input, so a test that crashes leaves nothing running. Imported by the fixtures in this folder (a
script's own folder is first on Python's path)."""
import os
import sys
import threading


def exit_when_stdin_closes():
    """Exit as soon as the test process lets go of our standard input (or dies), from a thread of its own."""
    def watch():
        try:
            while sys.stdin.buffer.read(4096):
                pass
        finally:
            os._exit(0)
    threading.Thread(target=watch, daemon=True).start()
