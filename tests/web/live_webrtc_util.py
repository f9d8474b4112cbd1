"""What the live WebRTC tests share: starting pipelines/live-webrtc.sh on a free port and waiting
for its stream, plain HTTP requests, an SDP offer written here (the shape a browser sends), the
server's memory."""
import http.client
import os
import re
import signal
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """pipelines/live-webrtc.sh BUILD PORT PROPS [OPTIONS] in a session of its own."""

    def __init__(self, build, src, options=(), props=None):
        # The embedded default model (data/default), named: the test environment's H3_MODEL_DIR is
        # the random tiny model, which draws no red circle and no blue square.
        if props is None:
            props = (f"model={os.path.join(src, 'data', 'default')} width=256 height=160 seed=4 queue-chunks=0 "
                     "prompt='a red circle moving right on a black background'")
        self.port = free_port()
        self.log_path = os.path.join(build, "meson-logs", f"live-webrtc-{self.port}.log")
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(["setsid", "bash", os.path.join(src, "pipelines", "live-webrtc.sh"), build,
                                      str(self.port), props, *options], stdout=self.log, stderr=subprocess.STDOUT)
        self.url = None
        # The page's address is printed once the pipeline plays and the port listens.
        for _ in range(1200):
            self.log.seek(0)
            m = re.search(r"h3-live-webrtc: (http://\S+)", self.log.read())
            if m:
                self.url = m.group(1)
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        if self.url is None:
            self.stop()
            self.log.seek(0)
            raise RuntimeError("the server did not start:\n" + self.log.read())

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def pid(self):
        """The server binary's pid (the script's child)."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid), "-f", "h3-live-webrtc"], capture_output=True, text=True)
        return int(out.stdout.split()[0])

    def rss_kib(self):
        with open(f"/proc/{self.pid()}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

    def descriptors(self):
        return len(os.listdir(f"/proc/{self.pid()}/fd"))

    def threads(self):
        with open(f"/proc/{self.pid()}/status") as f:
            return int(re.search(r"Threads:\s+(\d+)", f.read()).group(1))

    def request(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        out = (r.status, r.read().decode("utf-8", "replace"), dict(r.getheaders()))
        c.close()
        return out

    def request_unread(self, head, first_bytes):
        """Sends request head and the first bytes of a body that would be too large, and reads the
        answer the server gives without reading the rest: (status, body)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as c:
            c.sendall(head.encode() + first_bytes)
            data = b""
            while True:
                got = c.recv(65536)
                if not got:
                    break
                data += got
        head_text, _, body = data.partition(b"\r\n\r\n")
        return int(head_text.split()[1]), body.decode("utf-8", "replace")

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


FINGERPRINT = ":".join(["5A"] * 32)


def offer(video="h264", audio=True, data=True, recv="recvonly"):
    """An SDP offer as a browser makes one: H.264 constrained baseline (or VP8) video, Opus, a data
    channel, bundled, no candidates (the server's checks reach the browser's side; here nobody
    answers them)."""
    mids = [str(i) for i in range(int(video is not None) + int(audio) + int(data))]
    lines = ["v=0", "o=- 4611731400430051336 2 IN IP4 127.0.0.1", "s=-", "t=0 0",
             "a=group:BUNDLE " + " ".join(mids), "a=msid-semantic: WMS"]
    mid = 0

    def common():
        nonlocal mid
        out = ["c=IN IP4 0.0.0.0", "a=ice-ufrag:h3te", "a=ice-pwd:h3testh3testh3testh3test",
               "a=ice-options:trickle", "a=fingerprint:sha-256 " + FINGERPRINT, "a=setup:actpass", f"a=mid:{mid}"]
        mid += 1
        return out
    if video == "h264":
        lines += ["m=video 9 UDP/TLS/RTP/SAVPF 102 108", *common(), f"a={recv}", "a=rtcp-mux",
                  "a=rtpmap:102 H264/90000", "a=rtcp-fb:102 nack pli",
                  "a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f",
                  "a=rtpmap:108 H264/90000", "a=rtcp-fb:108 nack pli",
                  "a=fmtp:108 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"]
    elif video == "vp8":
        lines += ["m=video 9 UDP/TLS/RTP/SAVPF 96", *common(), f"a={recv}", "a=rtcp-mux", "a=rtpmap:96 VP8/90000"]
    if audio:
        lines += ["m=audio 9 UDP/TLS/RTP/SAVPF 111", *common(), "a=recvonly", "a=rtcp-mux",
                  "a=rtpmap:111 opus/48000/2", "a=fmtp:111 minptime=10;useinbandfec=1"]
    if data:
        lines += ["m=application 9 UDP/DTLS/SCTP webrtc-datachannel", *common(), "a=sctp-port:5000",
                  "a=max-message-size:262144"]
    return "\r\n".join(lines) + "\r\n"
