#!/usr/bin/python3
"""Real viewers joining and leaving the live server (pipelines/live-webrtc.sh) in Debian's headless
Chromium: each cycle opens the page, which completes ICE, DTLS and the data channel and paints
frames with their chunk times, then leaves (the page's DELETE). After every cycle the server counts
no viewer; after the last it holds the descriptors it held after the fifth (the first ones open
GLib's and libnice's pools for good), at most 4 threads more, and its memory grew by at most 48 MiB
(a leaked viewer holds a webrtcbin with its DTLS, SCTP and SRTP state: megabytes each; the engine's
own allocations move the figure by tens of MiB, so memory is the weak check, descriptors the strict
one). Those of the fifth cycle and the last are read once the server is idle: a connection
still closing, or a pool thread not yet let go, is given up to 30 s; a leaked viewer's never go.

    live_webrtc_cycles_test.py BUILD_DIR SOURCE_DIR [CYCLES]
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_webrtc_util import Server  # noqa: E402
from live_webrtc_page_test import browser, webdriver  # noqa: E402

failures = []


def viewers(server):
    return json.loads(server.request("GET", "/stats")[1])["viewers"]


def until(what, check, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.1)
    failures.append(f"{what}: not within {seconds} s")
    return False


def main():
    build, src = sys.argv[1], sys.argv[2]
    cycles = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    missing = [p for p in ("/usr/bin/chromium", "/usr/bin/chromedriver") if not os.path.exists(p)]
    if webdriver is None or missing:
        print("live webrtc cycles: skipped: needs chromium, chromium-driver and python3-selenium "
              f"(missing: {', '.join(missing) or 'selenium'})")
        return 77
    if not os.path.exists(os.path.join(build, "pipelines", "h3-live-webrtc")):
        print("live webrtc cycles: skipped: h3-live-webrtc is not built (needs libsoup-3.0-dev and "
              "libgstreamer-plugins-bad1.0-dev; scripts/install-deps.sh)")
        return 77
    server = Server(build, src)
    driver = None
    held = {}
    try:
        driver = browser()
        baseline = (server.rss_kib(), server.descriptors(), server.threads())
        for cycle in range(1, cycles + 1):
            driver.get(server.url)
            # Connected and playing: ICE and DTLS done, frames painted and matched to chunk times
            # that came over the data channel.
            if not until(f"cycle {cycle}'s viewer playing", lambda: driver.execute_script(
                    "const s = window.h3Live.state(); return s.connected && s.painted >= 12 && s.latencies.length >= 1")):
                break
            if viewers(server) != 1:
                failures.append(f"cycle {cycle}: {viewers(server)} viewers while one watches")
            driver.execute_async_script("window.h3Live.leave().then(arguments[0])")
            # The page goes too (its pagehide DELETE finds no viewer): nothing of it stays open.
            driver.get("about:blank")
            if not until(f"cycle {cycle}'s viewer gone", lambda: viewers(server) == 0):
                break
            if cycle == 5:
                # The fifth cycle's figures once the server is idle: a closing connection, or a
                # pool thread (GLib lets an idle one go after 15 s), is not the viewer's.
                time.sleep(2)
                held[cycle] = (server.rss_kib(), server.descriptors(), server.threads())
            elif cycle == cycles and 5 in held:
                # Given the same time to settle as the fifth, and up to 30 s for idle pool threads.
                time.sleep(2)
                until("the descriptors and threads back where the fifth cycle left them",
                      lambda: server.descriptors() <= held[5][1] and server.threads() <= held[5][2] + 4, 30)
                held[cycle] = (server.rss_kib(), server.descriptors(), server.threads())
        served = json.loads(server.request("GET", "/stats")[1])["viewers_served"]
        if served != cycles:
            failures.append(f"the server served {served} viewers in {cycles} cycles")
        if 5 in held and cycles in held:
            first, last = held[5], held[cycles]
            print(f"live webrtc cycles: {cycles} browser viewers joined, played and left; before any: memory "
                  f"{baseline[0]} KiB, {baseline[1]} descriptors, {baseline[2]} threads; after 5 and {cycles}: memory "
                  f"{first[0]} and {last[0]} KiB, descriptors {first[1]} and {last[1]}, threads {first[2]} and {last[2]}")
            if last[1] != first[1]:
                failures.append(f"descriptors after cycle {cycles}: {last[1]}, after cycle 5: {first[1]}")
            if last[2] > first[2] + 4:
                failures.append(f"threads went from {first[2]} after cycle 5 to {last[2]} after cycle {cycles}")
            if last[0] - first[0] > 48 * 1024:
                failures.append(f"memory grew by {last[0] - first[0]} KiB from cycle 5 to cycle {cycles}")
        if not server.alive():
            failures.append("the server ended during the cycles")
    finally:
        if driver is not None:
            driver.quit()
        server.stop()
    for f in failures:
        print("live webrtc cycles: FAIL: " + f, file=sys.stderr)
    if failures:
        print(server.output()[-3000:], file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
