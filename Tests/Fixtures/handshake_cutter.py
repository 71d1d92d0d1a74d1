"""A TCP proxy on 127.0.0.1 in front of a TLS server on 127.0.0.1:PORT that cuts the first COUNT
connections in the middle of the TLS handshake: it reads the client's first bytes (its ClientHello)
and resets the connection, as a flaky network or a restarting server does. Every later connection is
passed on both ways, byte for byte. Prints the port it bound, then serves until its standard input
closes. Each cut is written as one line `cut` on standard error.

Usage: handshake_cutter.py UPSTREAM_PORT COUNT
"""
import socket
import struct
import sys
import threading

from fixture_lifetime import serve_connections


def pump(source, target):
    try:
        while True:
            chunk = source.recv(65536)
            if not chunk:
                break
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def handle(client, upstream_port, remaining):
    if remaining.acquire(blocking=False):
        with client:
            client.settimeout(10)
            try:
                client.recv(100)  # the start of the ClientHello
            except OSError:
                pass
            # Said before the reset: the client may act on it, and the test read this, at once.
            print("cut", file=sys.stderr, flush=True)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, not a close
        return
    with client, socket.create_connection(("127.0.0.1", upstream_port)) as upstream:
        back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        back.start()
        pump(client, upstream)
        back.join()


def main():
    remaining = threading.Semaphore(int(sys.argv[2]))
    serve_connections(handle, int(sys.argv[1]), remaining)


if __name__ == "__main__":
    main()
