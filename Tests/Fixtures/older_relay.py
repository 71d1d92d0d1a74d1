"""A proxy on 127.0.0.1 in front of the relay on 127.0.0.1:PORT that plays a relay from before the
request members NAMES (comma-separated) existed: a JSON body with one of them at its top level is
answered 400 unknown_field, as such a relay answered it, and every other request is passed on and its
answer back (one request per connection). Prints the port it bound, then serves until its standard
input closes. Each refusal is counted as one line `refused NAME` on standard error, and each request's
first line (method, target, version) is written there as `request LINE`, as an access log would keep it.

Usage: older_relay.py UPSTREAM_PORT NAMES
"""
import json
import sys

from answer_dropper import forward, read_request
from fixture_lifetime import serve_connections


def handle(client, upstream_port, names):
    with client:
        request = read_request(client)
        if request is None:
            return
        print("request " + request.split(b"\r\n", 1)[0].decode("latin-1"), file=sys.stderr, flush=True)
        _, _, body = request.partition(b"\r\n\r\n")
        try:
            members = json.loads(body) if body else {}
        except ValueError:
            members = {}
        newer = [name for name in names if isinstance(members, dict) and name in members]
        if newer:
            print("refused " + newer[0], file=sys.stderr, flush=True)
            answer = json.dumps({"error": {"code": "unknown_field",
                                           "message": "The body has a member that is not one of the known."}}).encode()
            client.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                           b"Connection: close\r\n\r\n" % len(answer) + answer)
            return
        for chunk in forward(request, upstream_port):
            client.sendall(chunk)


def main():
    serve_connections(handle, int(sys.argv[1]), sys.argv[2].split(","))


if __name__ == "__main__":
    main()
