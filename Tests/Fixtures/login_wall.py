"""A proxy on 127.0.0.1 in front of the server on 127.0.0.1:PORT that, while the file WALL exists,
answers every request itself with 401 and an HTML login page (as a proxy's login wall or a maintenance
page does), and otherwise passes each request on and its answer back (one request per connection).
While the file DROP exists (optional), it passes each request on and loses the answer (hangs up).
While the file BUSY exists (optional), it answers every request itself with 503, a JSON error and
Retry-After: 1 (a relay restarting, or overloaded). While the file GONE exists (optional), it answers
every request itself with a plain-text 404 (a proxy whose backend is away). Prints the port it bound,
then serves until its standard input closes.

Usage: login_wall.py UPSTREAM_PORT WALL [DROP [BUSY [GONE]]]
"""
import os
import sys

from answer_dropper import forward, read_request
from fixture_lifetime import serve_connections

WALL_PAGE = b"<html><body><form>Sign in to continue</form></body></html>"


BUSY_ANSWER = b'{"error":{"code":"unavailable","message":"Try again shortly."}}'
GONE_ANSWER = b"404 page not found\n"


def handle(client, upstream_port, wall, drop, busy, gone=None):
    with client:
        request = read_request(client)
        if request is None:
            return
        if os.path.exists(wall):
            client.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Type: text/html\r\nWWW-Authenticate: Basic realm=\"proxy\"\r\n"
                           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(WALL_PAGE) + WALL_PAGE)
            return
        if busy is not None and os.path.exists(busy):
            client.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(BUSY_ANSWER) + BUSY_ANSWER)
            return
        if gone is not None and os.path.exists(gone):
            client.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
                           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(GONE_ANSWER) + GONE_ANSWER)
            return
        dropping = drop is not None and os.path.exists(drop)
        for chunk in forward(request, upstream_port):
            if not dropping:
                client.sendall(chunk)


def main():
    serve_connections(handle, int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None,
                      sys.argv[4] if len(sys.argv) > 4 else None, sys.argv[5] if len(sys.argv) > 5 else None)


if __name__ == "__main__":
    main()
