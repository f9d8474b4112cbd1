#!/usr/bin/python3
"""The live WebRTC server's refusals and limits over plain HTTP (pipelines/live-webrtc.sh):
every refusal an HTTP status with its reason, and the stream goes on (a prompt still applies
after them all); viewers come and go without the server keeping their descriptors, threads or
memory; listening beyond the loopback, steering needs the token.

    live_webrtc_http_test.py BUILD_DIR SOURCE_DIR
"""
import concurrent.futures
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_webrtc_util import Server, offer  # noqa: E402

SDP = {"Content-Type": "application/sdp"}
failures = []


def expect(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")


def refusals_and_limits(build, src):
    s = Server(build, src, ["--max-viewers", "2", "--prompts-per-second", "2", "--max-prompt-bytes", "256"])
    try:
        status, body, _ = s.request("GET", "/")
        expect("GET / status", status, 200)
        expect("the page has its video", "<video id=\"live\"" in body, True)
        expect("/config", json.loads(s.request("GET", "/config")[1])["steering"], "open")
        # The same encoding as HLS: its page and a playlist with segments.
        expect("GET /hls/", s.request("GET", "/hls/")[0], 200)
        playlist = ""
        for _ in range(300):
            status, playlist, headers = s.request("GET", "/hls/live.m3u8")
            if status == 200 and "#EXTINF" in playlist:
                break
            time.sleep(0.1)
        expect("the HLS playlist's segments", "#EXTINF" in playlist, True)
        segment = next((line for line in playlist.splitlines() if line.endswith(".ts")), "")
        status, _, headers = s.request("GET", "/hls/" + segment)
        expect("an HLS segment", (status, headers.get("Content-Type")), (200, "video/mp2t"))
        expect("a name the sink never writes", s.request("GET", "/hls/.live.m3u8")[:2], (404, "no such HLS file\n"))

        # Offers.
        expect("offer as text/plain", s.request("POST", "/whep", offer(), {"Content-Type": "text/plain"})[:2],
               (415, "the offer must be sent as application/sdp, not text/plain\n"))
        # Too large: answered from the headers, the body never read (the connection closes).
        expect("an oversized offer", s.request_unread("POST /whep HTTP/1.1\r\nHost: h\r\nContent-Type: "
                                                      "application/sdp\r\nContent-Length: 40000\r\n\r\n", b"v=0\r\n"),
               (413, "the SDP offer is 40000 bytes; at most 32768 are taken\n"))
        expect("a chunked prompt beyond the limit",
               s.request_unread("POST /prompt HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
                                b"1000\r\n" + b"x" * 4096 + b"\r\n"),
               (413, "the prompt is more than 256 bytes; at most 256 are taken\n"))
        expect("a body that is not SDP", s.request("POST", "/whep", "hello", SDP)[:2],
               (400, "the body is not an SDP offer (it must start with v=0)\n"))
        expect("an offer without video", s.request("POST", "/whep", offer(video=None), SDP)[:2],
               (400, "the offer has no video m-line the viewer receives on (recvonly or sendrecv)\n"))
        expect("an offer whose video only sends", s.request("POST", "/whep", offer(recv="sendonly"), SDP)[:2],
               (400, "the offer has no video m-line the viewer receives on (recvonly or sendrecv)\n"))
        expect("an offer of VP8 only", s.request("POST", "/whep", offer(video="vp8"), SDP)[:2],
               (400, "the offer's video accepts no H.264 constrained baseline with packetization-mode=1 "
                     "(profile-level-id 42e0xx): the one encoding every viewer shares\n"))
        expect("an offer without a data channel", s.request("POST", "/whep", offer(data=False), SDP)[:2],
               (400, "the offer has no data channel (m=application): the page's channel carries the chunk "
                     "times, the applied prompts and the keep-alive\n"))

        # Two viewers; the third and 50 at once are refused; one leaves, another comes.
        first = s.request("POST", "/whep", offer(), SDP)
        second = s.request("POST", "/whep", offer(), SDP)
        for name, (status, answer, headers) in (("first", first), ("second", second)):
            expect(f"the {name} viewer's status", status, 201)
            expect(f"the {name} answer sends H.264 and Opus", bool(re.search(r"m=video .*\r\n(.*\r\n)*a=sendonly", answer))
                   and "OPUS/48000/2" in answer and "m=application" in answer, True)
        expect("the first viewer's Location", first[2].get("Location"), "/whep/1")
        with concurrent.futures.ThreadPoolExecutor(50) as pool:
            crowd = list(pool.map(lambda _: s.request("POST", "/whep", offer(), SDP)[:2], range(50)))
        expect("50 offers at once beyond the limit", sorted(set(crowd)),
               [(503, "the server has its 2 viewers (--max-viewers); try again when one leaves\n")])
        expect("viewers after the crowd", json.loads(s.request("GET", "/stats")[1])["viewers"], 2)
        expect("DELETE /whep/1", s.request("DELETE", "/whep/1")[0], 200)
        expect("DELETE /whep/1 again", s.request("DELETE", "/whep/1")[:2], (404, "no viewer 1\n"))
        third = s.request("POST", "/whep", offer(), SDP)
        expect("a viewer after one left", third[0], 201)
        for status, _, headers in (second, third):
            if status == 201:
                expect("DELETE " + headers["Location"], s.request("DELETE", headers["Location"])[0], 200)

        # 30 join/leave cycles: after the 30th the server holds the descriptors it held after the 10th
        # (each viewer's sockets gone with it: at least 6 a viewer), about its threads (GLib's pools
        # keep a few idle ones, a leaked webrtcbin keeps several), and about its memory (the engine's
        # own allocations move it by tens of MiB; a leaked viewer is about 1 MiB).
        held = {}
        for cycle in range(1, 31):
            status, _, headers = s.request("POST", "/whep", offer(), SDP)
            expect(f"cycle {cycle}'s offer", status, 201)
            if status == 201:
                expect(f"cycle {cycle}'s leave", s.request("DELETE", headers["Location"])[0], 200)
            if cycle in (10, 30):
                held[cycle] = (s.rss_kib(), s.descriptors(), s.threads())
        print(f"live webrtc: after 10 and 30 join/leave cycles: memory {held[10][0]} and {held[30][0]} KiB, "
              f"descriptors {held[10][1]} and {held[30][1]}, threads {held[10][2]} and {held[30][2]}")
        # Not more (a leaked viewer adds 6 or more a cycle); one fewer happens: a descriptor still
        # open at the 10th sample (14 then 13, seen once in a clean-clone CI) was gone by the 30th.
        if held[30][1] > held[10][1]:
            failures.append(f"the server's descriptors went from {held[10][1]} to {held[30][1]} from cycle 10 to 30")
        if held[30][2] > held[10][2] + 4:
            failures.append(f"the server's threads went from {held[10][2]} to {held[30][2]} from cycle 10 to 30")
        if held[30][0] - held[10][0] > 64 * 1024:
            failures.append(f"the server's memory grew by {held[30][0] - held[10][0]} KiB from cycle 10 to cycle 30")
        expect("viewers after the cycles", json.loads(s.request("GET", "/stats")[1])["viewers"], 0)

        # Prompts.
        text = {"Content-Type": "text/plain; charset=utf-8"}
        expect("a prompt of 1 MiB", s.request_unread("POST /prompt HTTP/1.1\r\nHost: h\r\nContent-Length: "
                                                     f"{1 << 20}\r\n\r\n", b"a red"),
               (413, f"the prompt is {1 << 20} bytes; at most 256 are taken\n"))
        expect("a prompt of invalid UTF-8", s.request("POST", "/prompt", b"a \xff\xfe circle", text)[:2],
               (400, "the prompt is not valid UTF-8\n"))
        expect("an empty prompt", s.request("POST", "/prompt", " \n", text)[:2], (400, "the prompt is empty\n"))
        expect("GET /prompt", s.request("GET", "/prompt")[:2], (405, "POST the prompt as text/plain UTF-8\n"))
        # 100 changes as fast as they go: at most 2 a second pass, the rest are told when to retry.
        started = time.monotonic()
        answers = [s.request("POST", "/prompt", f"a green square moving down on a white background {i}", text)
                   for i in range(100)]
        seconds = time.monotonic() - started
        taken = [a for a in answers if a[0] == 202]
        refused = [a for a in answers if a[0] != 202]
        print(f"live webrtc: 100 prompts in {seconds:.2f} s: {len(taken)} taken, {len(refused)} refused")
        if not taken or len(taken) > 2 * (int(seconds) + 1):
            failures.append(f"{len(taken)} of 100 prompts in {seconds:.2f} s were taken (2 a second may be)")
        reasons = {re.sub(r"\d+ ms", "N ms", a[1]) for a in refused}
        expect("the refusals of too many prompts", (sorted({a[0] for a in refused}), sorted(reasons)),
               ([429], ["at most 2 prompt changes a second (all viewers together); the next in N ms\n"]))
        expect("Retry-After", all(a[2].get("Retry-After") == "1" for a in refused), True)

        # The stream went on through all of it: the last prompt taken applies.
        time.sleep(1.1)
        before = json.loads(s.request("GET", "/stats")[1])["prompts_applied"]
        expect("a prompt after the refusals", s.request("POST", "/prompt", "a blue triangle bouncing on a gray "
                                                        "background", text)[0], 202)
        applied = before
        for _ in range(600):
            applied = json.loads(s.request("GET", "/stats")[1])["prompts_applied"]
            if applied > before:
                break
            time.sleep(0.1)
        expect("prompts applied after the last one", applied > before, True)
        expect("the server still runs", s.alive(), True)
    finally:
        s.stop()


def steering_token(build, src):
    s = Server(build, src, ["--listen", "0.0.0.0"])
    try:
        m = re.search(r"\?token=([0-9a-f]{32})$", s.url)
        expect("the printed address carries a 32-digit token", m is not None, True)
        token = m.group(1) if m else ""
        expect("/config", json.loads(s.request("GET", "/config")[1])["steering"], "token")
        text = {"Content-Type": "text/plain"}
        expect("a prompt without the token", s.request("POST", "/prompt", "a fox", text)[:2],
               (403, "steering needs the token printed when the server started (the page's URL ?token=...); "
                     "without it this viewer watches only\n"))
        expect("a prompt with a wrong token",
               s.request("POST", "/prompt", "a fox", {**text, "Authorization": "Bearer " + "0" * 32})[:2],
               (403, "the steering token is wrong; this viewer watches only\n"))
        expect("a prompt with the token", s.request("POST", "/prompt", "a fox", {**text, "Authorization":
                                                                                   "Bearer " + token})[0], 202)
        time.sleep(1.1)
        expect("a prompt with ?token=", s.request("POST", "/prompt?token=" + token, "a hen", text)[0], 202)
        expect("watching needs no token", s.request("POST", "/whep", offer(), SDP)[0], 201)
    finally:
        s.stop()


def main():
    build, src = sys.argv[1], sys.argv[2]
    if not os.path.exists(os.path.join(build, "pipelines", "h3-live-webrtc")):
        print("live webrtc: skipped: h3-live-webrtc is not built (needs libsoup-3.0-dev and "
              "libgstreamer-plugins-bad1.0-dev; scripts/install-deps.sh)")
        return 77
    refusals_and_limits(build, src)
    steering_token(build, src)
    for f in failures:
        print("live webrtc: FAIL: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
