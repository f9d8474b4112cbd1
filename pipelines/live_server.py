#!/usr/bin/env python3
"""Serves pipelines/live/index.html and, at /live.webm, h3src's endless causal stream as live WebM.

Each viewer's GET /live.webm runs its own gst-launch-1.0 (h3src sampler=causal num-frames=-1,
VP8 + Opus, webmmux streamable=true, to stdout) and the response carries its bytes as they come;
the pipeline stops when the viewer goes away. Python's standard library only.

    live_server.py --port PORT [--props "width=256 height=160 prompt=..."]
"""
import argparse
import http.server
import os
import shlex
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def pipeline(props):
    return (["gst-launch-1.0", "-q", "h3src", "name=s", "sampler=causal"] + shlex.split(props) +
            ["s.video", "!", "queue", "!", "videoconvert", "!", "vp8enc", "deadline=1", "keyframe-max-dist=24",
             "!", "mux.", "s.audio", "!", "queue", "!", "audioconvert", "!", "audioresample", "!", "opusenc",
             "!", "mux.", "webmmux", "name=mux", "streamable=true", "!", "fdsink", "fd=1"])


class Handler(http.server.BaseHTTPRequestHandler):
    props = ""

    def log_message(self, fmt, *args):
        sys.stderr.write("live_server: " + (fmt % args) + "\n")

    def do_GET(self):
        if self.path in ("/", "/index.html"):
            with open(os.path.join(HERE, "live", "index.html"), "rb") as f:
                body = f.read()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/live.webm":
            self.send_response(200)
            self.send_header("Content-Type", "video/webm")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            proc = subprocess.Popen(pipeline(self.props), stdout=subprocess.PIPE)
            try:
                while True:
                    data = proc.stdout.read1(65536)
                    if not data:
                        break
                    self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the viewer went away
            finally:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        else:
            self.send_error(404)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--props", default="width=256 height=160")
    a = ap.parse_args()
    Handler.props = a.props
    server = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print(f"live_server: http://127.0.0.1:{a.port}/ (h3src {a.props})", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
