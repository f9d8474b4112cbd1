#!/usr/bin/python3
"""The live page in a headless Chromium (Debian's chromium, chromium-driver, python3-selenium):
pipelines/live-hls.sh generates the endless causal h3src stream as HLS and serves the page; the
test asserts that
the <video> plays (currentTime advances by at least 3 s) and that a drawn frame is not blank, and
keeps a screenshot of the page as its artifact.

    live_page_test.py BUILD_DIR SOURCE_DIR
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
except ImportError:
    webdriver = None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    build, src = sys.argv[1], sys.argv[2]
    missing = [p for p in ("/usr/bin/chromium", "/usr/bin/chromedriver") if not os.path.exists(p)]
    if webdriver is None or missing:
        # meson's "skipped": scripts/install-deps.sh installs them.
        print("live page: skipped: needs chromium, chromium-driver and python3-selenium "
              f"(missing: {', '.join(missing) or 'selenium'})")
        return 77
    port = free_port()
    env = dict(os.environ)
    server = subprocess.Popen(["setsid", "bash", os.path.join(src, "pipelines", "live-hls.sh"), build, str(port),
                               "width=256 height=160 seed=4 prompt='a paper boat on a lake'"], env=env)
    artifact = os.path.join(build, "meson-logs", "live-page.png")
    driver = None
    try:
        # The stream is there once the server serves its playlist (the model loads first).
        playlist = f"http://127.0.0.1:{port}/live.m3u8"
        for _ in range(1200):
            try:
                with urllib.request.urlopen(playlist, timeout=2) as r:
                    if r.status == 200 and b"#EXTINF" in r.read():
                        break
            except OSError:
                pass
            time.sleep(0.1)
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--autoplay-policy=no-user-gesture-required", "--window-size=800,600"):
            opts.add_argument(arg)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        driver.get(f"http://127.0.0.1:{port}/")
        # Playing: currentTime once the first frames are shown, then 3 s of playback beyond it.
        deadline = time.time() + 180
        start = None
        now = 0.0
        while time.time() < deadline:
            ready, now = driver.execute_script(
                "const v = document.getElementById('live'); return [v.readyState, v.currentTime];")
            if ready >= 2 and start is None:
                start = now
            if start is not None and now - start >= 3.0:
                break
            time.sleep(0.25)
        stats = driver.execute_script("return window.h3Live.frameStats();")
        driver.save_screenshot(artifact)
        print(f"live page: playback from {start} s to {now:.2f} s; frame {json.dumps(stats)}; "
              f"screenshot {artifact}")
        failures = []
        if start is None:
            failures.append("the video never started playing")
        elif now - start < 3.0:
            failures.append(f"playback advanced {now - start:.2f} s, not 3 s")
        if stats["width"] != 256 or stats["height"] != 160:
            failures.append(f"the frame is {stats['width']}x{stats['height']}, not 256x160")
        if stats["std"] < 1.0:
            failures.append(f"the drawn frame is blank (mean {stats['mean']:.1f}, spread {stats['std']:.2f})")
        for f in failures:
            print("live page: FAIL: " + f, file=sys.stderr)
        return 1 if failures else 0
    finally:
        if driver is not None:
            driver.quit()
        # The script's own session: the server and the pipeline end with it.
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
