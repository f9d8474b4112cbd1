#!/usr/bin/python3
"""Figures of the interactive live server (pipelines/live-webrtc.sh) in Debian's headless Chromium,
printed (docs/performance.md, "Live over WebRTC"):

- glass latency: from a chunk's first frame leaving h3src (the server's wall clock, sent over the
  data channel with the frame's RTP time) to that frame's expected display time in the page
  (requestVideoFrameCallback), median and max over --seconds;
- prompt-to-glass: a prompt sent from the page until a painted frame shows it (blue on white after
  a red circle on black, and back), over WebRTC and, in a second browser at the same time, over the
  HLS of the same encoding; the HLS page's glass latency is the WebRTC one plus how much later the
  HLS page showed the same change;
- the server's CPU with 0, 1 and 4 WebRTC viewers (utime + stime of the process over 10 s each).

    live_webrtc_bench.py BUILD_DIR SOURCE_DIR [--seconds 30] [--trials 4]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_webrtc_util import Server  # noqa: E402
from live_webrtc_page_test import browser  # noqa: E402

PROMPTS = [("a blue square moving left on a white background", "c.corner.every(v => v > 170) && c.blue > 0.01"),
           ("a red circle moving right on a black background", "c.corner.every(v => v < 90) && c.red > 0.005")]
# The HLS page has no watcher of its own: this one paints every frame into a canvas as the WebRTC
# page's does.
HLS_WATCH = """
const v = document.getElementById('live');
window.benchColours = () => {
  const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;
  const g = c.getContext('2d'); g.drawImage(v, 0, 0);
  const px = g.getImageData(0, 0, c.width, c.height).data;
  let blue = 0, red = 0, n = 0;
  for (let i = 0; i < px.length; i += 4) {
    const r = px[i], gr = px[i + 1], b = px[i + 2]; n++;
    if (b > 120 && b > r + 60 && b > gr + 60) blue++;
    if (r > 120 && r > gr + 60 && r > b + 60) red++;
  }
  return { blue: blue / n, red: red / n, corner: [px[0], px[1], px[2]] };
};
window.benchWatch = null;
const onFrame = (now, md) => {
  const w = window.benchWatch;
  if (w && !w.seenAt && w.test(window.benchColours())) w.seenAt = performance.timeOrigin + md.expectedDisplayTime;
  v.requestVideoFrameCallback(onFrame);
};
v.requestVideoFrameCallback(onFrame);
"""


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_over(server, seconds):
    pid = server.pid()
    before, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.monotonic() - t0)


def wait(driver, script, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.1)
    raise RuntimeError(f"not within {seconds} s: {script}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("src")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--trials", type=int, default=4)
    a = ap.parse_args()
    server = Server(a.build, a.src)
    drivers = []
    try:
        time.sleep(5)  # the model loaded, the stream steady
        cpu0 = cpu_over(server, 10)
        page = browser()
        drivers.append(page)
        page.get(server.url)
        wait(page, "const s = window.h3Live.state(); return s.connected && s.painted > 48")
        hls = browser()
        drivers.append(hls)
        hls.get(server.url + "hls/")
        wait(hls, "const v = document.getElementById('live'); return v.readyState >= 2 && v.currentTime > 1")
        hls.execute_script(HLS_WATCH)

        # Glass latency over --seconds.
        start = page.execute_script("return window.h3Live.state().latencies.length")
        time.sleep(a.seconds)
        lat = page.execute_script("return window.h3Live.state().latencies")[start:]
        glass_median, glass_max = statistics.median(lat), max(lat)
        print(f"glass latency (WebRTC): median {glass_median:.0f} ms, max {glass_max:.0f} ms over {len(lat)} chunks "
              f"in {a.seconds:.0f} s")

        # Prompt-to-glass, WebRTC and HLS at once.
        webrtc, extra = [], []
        for trial in range(a.trials):
            prompt, test = PROMPTS[trial % 2]
            hls.execute_script(f"window.benchWatch = {{ test: (c) => {test}, armedAt: Date.now() }};")
            page.execute_script(f"window.h3Live.watch({json.dumps(test)}); window.h3Live.sendPrompt({json.dumps(prompt)});")
            w = wait(page, "const w = window.h3Live.watched(); return w && w.seenAt ? w : null", 30)
            h = wait(hls, "const w = window.benchWatch; return w && w.seenAt ? {armedAt: w.armedAt, seenAt: w.seenAt} : null", 60)
            webrtc.append(w["seenAt"] - w["armedAt"])
            extra.append(h["seenAt"] - w["seenAt"])
            print(f"  '{prompt}': WebRTC {webrtc[-1]:.0f} ms, HLS {h['seenAt'] - h['armedAt']:.0f} ms after it was sent")
            time.sleep(2)
        print(f"prompt-to-glass (WebRTC): median {statistics.median(webrtc):.0f} ms, max {max(webrtc):.0f} ms "
              f"over {len(webrtc)} changes")
        print(f"HLS beside it: the same change {statistics.median(extra):.0f} ms later (median): glass latency about "
              f"{glass_median + statistics.median(extra):.0f} ms")
        hls.quit()
        drivers.remove(hls)

        cpu1 = cpu_over(server, 10)
        more = browser()
        drivers.append(more)
        more.get(server.url)
        for _ in range(2):
            more.switch_to.new_window("tab")
            more.get(server.url)
        time.sleep(3)
        cpu4 = cpu_over(server, 10)
        stats = json.loads(server.request("GET", "/stats")[1])
        print(f"server CPU: {cpu0 * 100:.0f} % with no viewer, {cpu1 * 100:.0f} % with 1, {cpu4 * 100:.0f} % with "
              f"{stats['viewers']}: {(cpu4 - cpu1) / max(1, stats['viewers'] - 1) * 100:.1f} % of a core per added viewer")
    finally:
        for d in drivers:
            d.quit()
        server.stop()


if __name__ == "__main__":
    main()
