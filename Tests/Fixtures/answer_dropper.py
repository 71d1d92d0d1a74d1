"""A proxy on 127.0.0.1 that loses every answer: it reads each HTTP request whole, passes it on to
the server on 127.0.0.1:PORT, waits for the server's answer, then hangs up on the client without
giving it (a connection that dropped on the way back). Prints the port it bound, then serves until
its standard input closes.

Usage: answer_dropper.py UPSTREAM_PORT
"""
import socket
import sys

from fixture_lifetime import serve_connections


def read_request(connection):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = connection.recv(65536)
        if not chunk:
            return None
        body += chunk
    return head + b"\r\n\r\n" + body


def forward(request, upstream_port):
    """Passes `request` on to 127.0.0.1:upstream_port as a reverse proxy does (Host names the server,
    whose Host check wants its own port; one request per connection, the answer ending with its
    close), and yields the answer's bytes as they come."""
    with socket.create_connection(("127.0.0.1", upstream_port)) as upstream:
        head, _, body = request.partition(b"\r\n\r\n")
        lines = [line for line in head.split(b"\r\n")
                 if line.split(b":", 1)[0].strip().lower() not in (b"host", b"connection")]
        lines += [b"Host: 127.0.0.1:%d" % upstream_port, b"Connection: close"]
        upstream.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        while True:
            chunk = upstream.recv(65536)
            if not chunk:
                return
            yield chunk


def handle(client, upstream_port):
    with client:
        request = read_request(client)
        if request is None:
            return
        for _ in forward(request, upstream_port):
            pass
        # The answer came; the client never gets it.



def main():
    serve_connections(handle, int(sys.argv[1]))


if __name__ == "__main__":
    main()
