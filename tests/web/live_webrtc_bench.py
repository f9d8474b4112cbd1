#!/usr/bin/python3
"""Figures of the interactive live server (pipelines/live-webrtc.sh) in Debian's headless Chromium,
printed (docs/performance.md, "Live over WebRTC"):

- glass latency: from a chunk's first frame leaving h3src (the server's wall clock, sent over the
  data channel with the frame's RTP time) to that frame's expected display time in the page
  (requestVideoFrameCallback), median and max over --seconds;
- prompt-to-glass: a prompt sent from the page until a painted frame shows it (blue on white after
  a red circle on black, and back), with where the time went: until the engine took the change (the
  server's log: h3src's "prompt change" and "the engine takes the new prompt" lines), until the
  chunk it took left h3src, from there to the first changed frame, and that frame's own glass
  latency (its RTP time placed among the chunks' RTP and server times);
- the HLS page's glass latency, measured on its own: a second browser plays the HLS of the same
  encoding at the same time and watches for the same change; the first changed frame is the same
  encoded frame on both pages, so its time on the HLS page less the server's time it left h3src is
  the HLS glass latency;
- the server's CPU with 0, 1 and 4 WebRTC viewers (utime + stime of the process over 10 s each).
The machine (lscpu's model name, AVX-512 / bf16 flags) and the load average are printed beside.

    live_webrtc_bench.py BUILD_DIR SOURCE_DIR [--seconds 30] [--trials 8] [--queue-chunks N [--size 256x160]]
"""
import argparse
import json
import os
import re
import subprocess
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


def machine():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = re.search(r"Model name:\s*(.+)", out)
    flags = re.search(r"Flags:\s*(.+)", out)
    have = [f for f in ("avx512f", "avx512_bf16", "amx_bf16") if flags and f in flags.group(1).split()]
    return f"{model.group(1).strip() if model else '?'} ({', '.join(have) or 'no AVX-512'}), {os.cpu_count()} cores"


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def gst_seconds(line):
    h, m, s = line.split()[0].split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def engine_takes(log, prompt, after):
    """From the server's log (GST_DEBUG=h3src:5): the seconds between h3src's "prompt change" line
    for `prompt` after line `after` and the engine's "takes the new prompt" line that follows,
    and the index of that line."""
    lines = log.splitlines()
    given = None
    for i in range(after, len(lines)):
        line = lines[i]
        if given is None and "prompt change from" in line and line.rstrip().endswith(f'"{prompt}"'):
            given = gst_seconds(line)
        elif given is not None and "the engine takes the new prompt from chunk" in line:
            return gst_seconds(line) - given, i + 1
    return None, after


def holds(log):
    """queue-chunks=0: h3src's "holding the engine" lines (ms held, ms lead) and how many chunks came
    after they were due (the server prints the element's warnings)."""
    held = [(int(m.group(1)), int(m.group(2)))
            for m in re.finditer(r"queued: holding the engine (-?\d+) ms \(lead (\d+) ms\)", log)]
    return held, log.count("slower than real time")


def frame_left(chunks, rtp):
    """When the frame with RTP time `rtp` left h3src (server ms): the chunk message at or before it,
    plus the frames between (90 kHz)."""
    best = None
    for c in chunks:
        d = (rtp - c["rtp"]) % (1 << 32)
        if d < (1 << 31) and (best is None or d < best[0]):
            best = (d, c)
    if best is None:
        return None, None
    d, c = best
    return c["wall"] + d / 90.0, (c["chunk"], round(d / 3750))  # 3750 ticks: one frame at 24 fps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("src")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--queue-chunks", type=int, default=None,
                    help="h3src's queue-chunks instead of the server's default (0: just in time)")
    ap.add_argument("--size", default="256x160", help="the picture, WIDTHxHEIGHT, with --queue-chunks")
    a = ap.parse_args()
    print(f"machine: {machine()}; load average at start {load()}")
    os.environ["GST_DEBUG"] = "h3src:5"
    os.environ["GST_DEBUG_NO_COLOR"] = "1"
    props = None
    if a.queue_chunks is not None:
        width, height = a.size.split("x")
        props = (f"model={os.path.join(a.src, 'data', 'default')} width={width} height={height} seed=4 "
                 f"queue-chunks={a.queue_chunks} "
                 "prompt='a red circle moving right on a black background'")
    server = Server(a.build, a.src, props=props)
    print(f"server: {server.url} ({'queue-chunks=' + str(a.queue_chunks) + ', ' + a.size if props else 'its defaults'})")
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
              f"in {a.seconds:.0f} s (load average {load()})")

        # Prompt-to-glass, WebRTC and HLS at once.
        webrtc, hls_glass, log_at = [], [], 0
        for trial in range(a.trials):
            prompt, test = PROMPTS[trial % 2]
            hls.execute_script(f"window.benchWatch = {{ test: (c) => {test}, armedAt: Date.now() }};")
            page.execute_script(f"window.h3Live.watch({json.dumps(test)}); window.h3Live.sendPrompt({json.dumps(prompt)});")
            w = wait(page, "const w = window.h3Live.watched(); return w && w.seenAt ? w : null", 30)
            h = wait(hls, "const w = window.benchWatch; return w && w.seenAt ? {armedAt: w.armedAt, seenAt: w.seenAt} : null", 60)
            st = page.execute_script("return window.h3Live.state()")
            webrtc.append(w["seenAt"] - w["armedAt"])
            took, log_at = engine_takes(server.output(), prompt, log_at)
            applied = [x for x in st["applied"] if x["prompt"] == prompt]
            chunk = applied[-1]["chunk"] if applied else None
            chunk_wall = next((c["wall"] for c in st["chunks"] if c["chunk"] == chunk), None)
            left, (fchunk, fframe) = frame_left(st["chunks"], w["rtp"]) if w.get("rtp") is not None else (None, (None, None))
            parts = [f"WebRTC {webrtc[-1]:.0f} ms after it was sent"]
            if took is not None:
                parts.append(f"taken by the engine {took * 1000:.0f} ms after h3src had it")
            if chunk_wall is not None:
                parts.append(f"chunk {chunk} (the first made under it) left h3src {chunk_wall - w['armedAt']:.0f} ms after sending")
            if left is not None:
                hls_glass.append(h["seenAt"] - left)
                parts.append(f"first changed frame: chunk {fchunk} frame {fframe}, left {left - w['armedAt']:.0f} ms after "
                             f"sending, painted {w['seenAt'] - left:.0f} ms later (WebRTC), {hls_glass[-1]:.0f} ms later (HLS)")
            print(f"  '{prompt}': " + "; ".join(parts))
            time.sleep(2)
        print(f"prompt-to-glass (WebRTC): median {statistics.median(webrtc):.0f} ms, max {max(webrtc):.0f} ms "
              f"over {len(webrtc)} changes (load average {load()})")
        if hls_glass:
            print(f"glass latency (HLS, the changed frame from leaving h3src to painted): median "
                  f"{statistics.median(hls_glass):.0f} ms, max {max(hls_glass):.0f} ms over {len(hls_glass)} changes")
        held, late = holds(server.output())
        if held:
            waits = [h for h, _ in held]
            print(f"just in time: {len(held)} chunks; the engine held before {sum(w > 0 for w in waits)} of them, "
                  f"median {statistics.median(waits):.0f} ms (negative: late by that much), lead median "
                  f"{statistics.median([ld for _, ld in held]):.0f} ms, max {max(ld for _, ld in held)} ms")
        print(f"the server warned of chunks slower than real time: {'yes' if late else 'no'}")
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
