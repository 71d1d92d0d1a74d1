"""An ordinary web server on 127.0.0.1 (Python's http.server, serving an empty folder): what a mistyped
--url reaches instead of a Jotter. GET answers 200 or 404 with HTML; POST, which it does not know, 501.
Prints the port it bound, then serves until its standard input closes.

Usage: plain_http_server.py FOLDER
"""
import functools
import http.server
import sys

from fixture_lifetime import exit_when_stdin_closes


def main():
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
    handler.log_message = lambda *arguments: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    print(server.server_address[1], flush=True)
    exit_when_stdin_closes()
    server.serve_forever()


if __name__ == "__main__":
    main()
