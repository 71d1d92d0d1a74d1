#!/usr/bin/python3
"""A TCP proxy in front of PostgreSQL that, when armed, loses one COMMIT's answer.

Usage: pg_commit_cutter.py --upstream-port PORT --arm-file PATH --record PATH [--drop-on TEXT]

Listens on 127.0.0.1 (a free port, printed on the first line of standard output) and passes bytes both
ways to 127.0.0.1:PORT. While PATH exists, the first connection that sends a COMMIT after inserting
into jotter_messages (a message stored in a PostgreSQL outbox) has that COMMIT passed on and carried
out, the server's answer read and thrown away, and the connection closed: the client cannot know
whether its transaction committed. The arm file is then removed and a line written to the record file.
With --drop-on, the first statement containing TEXT while armed is not passed on at all: the connection
closes in the middle of its transaction, which the server then rolls back.

The bytes are searched, not parsed as PostgreSQL's protocol: libpq writes a statement's messages
(Parse, Bind, Execute, Sync) in one send, so a statement's text does not straddle two reads here.
Stops when standard input closes.
"""
import argparse
import os
import socket
import sys
import threading

parser = argparse.ArgumentParser()
parser.add_argument("--upstream-port", type=int, required=True)
parser.add_argument("--arm-file", required=True)
parser.add_argument("--record", required=True)
parser.add_argument("--drop-on")
options = parser.parse_args()
lock = threading.Lock()


def armed():
    """Disarms, if armed; true if it was."""
    with lock:
        if not os.path.exists(options.arm_file):
            return False
        os.remove(options.arm_file)
    return True


def drop_here(chunk):
    """Whether this chunk is the statement never to pass on (and disarms if so)."""
    return options.drop_on is not None and options.drop_on.encode() in chunk and armed()


def cut_here(state, chunk):
    """Whether this chunk is the COMMIT to lose (and disarms if so)."""
    if options.drop_on is not None:
        return False
    if b"INSERT INTO jotter_messages" in chunk:
        state["inserted"] = True
    if not (state["inserted"] and b"COMMIT" in chunk):
        if b"COMMIT" in chunk or b"ROLLBACK" in chunk:
            state["inserted"] = False
        return False
    state["inserted"] = False
    return armed()


def serve(client):
    upstream = socket.create_connection(("127.0.0.1", options.upstream_port))
    state = {"inserted": False}
    cut = threading.Event()
    answered = threading.Event()

    def downstream():
        try:
            while True:
                data = upstream.recv(65536)
                if cut.is_set():
                    # The COMMIT's answer: it happened, and the client never hears it. Recorded before
                    # the client's connection closes, so the client sees the record when it sees the cut.
                    with open(options.record, "a") as record:
                        record.write("cut\n")
                    answered.set()
                    break
                if not data:
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            client.close()

    threading.Thread(target=downstream, daemon=True).start()
    try:
        while True:
            data = client.recv(65536)
            if not data:
                break
            if drop_here(data):
                with open(options.record, "a") as record:
                    record.write("dropped\n")
                break
            if cut_here(state, data):
                cut.set()
                upstream.sendall(data)
                answered.wait(10)
                break
            upstream.sendall(data)
    except OSError:
        pass
    finally:
        # Shut down, not only closed: the downstream thread may be blocked reading `upstream`, and a close
        # alone would keep the connection open, its transaction (and the rows it locked) held by the server.
        for end in (client, upstream):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()


listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen(64)
print(listener.getsockname()[1], flush=True)


def accept():
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client,), daemon=True).start()


threading.Thread(target=accept, daemon=True).start()
sys.stdin.read()
