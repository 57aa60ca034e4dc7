"""A Python http.server for realservers_test.go.

Usage: python3 python_server.py HTTP/1.1|HTTP/1.0

Listens on 127.0.0.1 on a free port and prints "READY <port>". Paths are
/<kind>/<id>:
  get, post  answer the id (body and X-Id, with Content-Length)
  close      answer the id, then close the connection without saying so
  drop       close the connection without answering
Every POST id is counted; GET /counts answers the counts as JSON.
"""
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

posts = {}
lock = threading.Lock()
PATH = re.compile(r"^/([a-z]+)/([^/?]+)$")


class Handler(BaseHTTPRequestHandler):
    protocol_version = sys.argv[1] if len(sys.argv) > 1 else "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, body, extra=()):
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if self.path == "/counts":
            with lock:
                self.answer(json.dumps(posts))
            return
        m = PATH.match(self.path)
        if not m:
            self.send_error(404)
            return
        kind, id_ = m.group(1), m.group(2)
        if self.command == "POST":
            with lock:
                posts[id_] = posts.get(id_, 0) + 1
        if kind in ("get", "post"):
            self.answer(id_, [("X-Id", id_)])
        elif kind == "close":
            self.answer(id_, [("X-Id", id_)])
            self.wfile.flush()
            self.close_connection = True
        elif kind == "drop":
            self.close_connection = True
        else:
            self.send_error(404)

    do_GET = handle_any
    do_POST = handle_any
    do_HEAD = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


srv = Server(("127.0.0.1", 0), Handler)
print("READY %d" % srv.server_address[1], flush=True)
srv.serve_forever()
