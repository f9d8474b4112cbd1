#!/usr/bin/env python3
"""Serves the live page (pipelines/live/index.html) and an HLS folder beside it, for
pipelines/live-hls.sh: one generating pipeline writes the segments, every viewer reads them.
Python's standard library only.

    live_server.py --port PORT --hls DIR
"""
import argparse
import functools
import http.server
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write("live_server: " + (fmt % args) + "\n")

    def log_request(self, code="-", size="-"):
        if str(code) not in ("200", "304"):  # a viewer's steady polling is not news
            super().log_request(code, size)

    def end_headers(self):
        # A live playlist changes every segment: never cached.
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def do_GET(self):
        if self.path in ("/", "/index.html"):
            with open(os.path.join(HERE, "live", "index.html"), "rb") as f:
                body = f.read()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--hls", required=True)
    a = ap.parse_args()
    Handler.extensions_map = {**Handler.extensions_map, ".m3u8": "application/vnd.apple.mpegurl",
                              ".ts": "video/mp2t"}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), functools.partial(Handler, directory=a.hls))
    print(f"live_server: http://127.0.0.1:{a.port}/ (HLS from {a.hls})", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
