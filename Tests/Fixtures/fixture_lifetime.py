"""What every helper program a test starts shares: it lives as long as the test holds its standard
input, so a test that crashes leaves nothing running. Imported by the fixtures in this folder (a
script's own folder is first on Python's path)."""
import os
import socket
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


def serve_connections(handle, *arguments):
    """Listens on 127.0.0.1 (a free port, printed first), lives as long as standard input, and runs
    `handle(connection, *arguments)` on a thread of its own for each connection."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    print(listener.getsockname()[1], flush=True)
    exit_when_stdin_closes()
    while True:
        client, _ = listener.accept()
        threading.Thread(target=handle, args=(client,) + arguments, daemon=True).start()
