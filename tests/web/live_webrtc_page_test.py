#!/usr/bin/python3
"""The interactive live page (pipelines/live-webrtc.sh) in Debian's headless Chromium (chromium,
chromium-driver, python3-selenium): the WebRTC video plays (frames painted, 256x160, not blank,
each chunk's time through the data channel); a prompt typed into the page and sent changes the
picture (a red circle on black becomes blue on white) and its h3-prompt-applied comes back to
the page; a second viewer joins and leaves while the first plays on. The first page's screenshot
is kept as BUILD/meson-logs/live-webrtc-page.png.

    live_webrtc_page_test.py BUILD_DIR SOURCE_DIR
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_webrtc_util import Server  # noqa: E402

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError:
    webdriver = None

BLUE = "a blue square moving left on a white background"
# What the embedded default draws for it: a white background (the corner) and blue pixels.
BLUE_ON_WHITE = "c.corner.every(v => v > 170) && c.blue > 0.01"
failures = []


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--autoplay-policy=no-user-gesture-required", "--window-size=800,700"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def wait_for(driver, script, what, seconds=120):
    """Polls `script` (returning a value or null) until it answers; a failure when it never does."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.2)
    failures.append(f"{what}: not within {seconds} s")
    return None


def watch_only(build, src):
    """Listening beyond the loopback: the page without the token plays but cannot steer; with it, it can."""
    server = Server(build, src, ["--listen", "0.0.0.0"])
    driver = None
    try:
        token = server.url.split("?token=")[1]
        page = f"http://127.0.0.1:{server.port}/"
        driver = browser()
        driver.get(page)
        wait_for(driver, "const s = window.h3Live.state(); return s.connected && s.painted >= 24",
                 "the viewer without the token playing")
        disabled = driver.execute_script("return [document.getElementById('prompt').disabled, "
                                         "document.getElementById('send').disabled, "
                                         "document.getElementById('answer').textContent]")
        if disabled != [True, True, "watching only: steering needs the token in the page’s address"]:
            failures.append(f"the page without the token: prompt box, button and note {disabled}")
        driver.get(page + "?token=" + token)
        wait_for(driver, "return window.h3Live.state().connected", "the viewer with the token connecting")
        if driver.execute_script("return document.getElementById('prompt').disabled"):
            failures.append("the page with the token cannot steer")
        sent = driver.execute_async_script("window.h3Live.sendPrompt('a green circle growing on a gray background')"
                                           ".then((e) => arguments[0](e.status))")
        if sent != 202:
            failures.append(f"the page with the token sent a prompt and got {sent}, not 202")
    finally:
        if driver is not None:
            driver.quit()
        server.stop()


def main():
    build, src = sys.argv[1], sys.argv[2]
    missing = [p for p in ("/usr/bin/chromium", "/usr/bin/chromedriver") if not os.path.exists(p)]
    if webdriver is None or missing:
        print("live webrtc page: skipped: needs chromium, chromium-driver and python3-selenium "
              f"(missing: {', '.join(missing) or 'selenium'})")
        return 77
    if not os.path.exists(os.path.join(build, "pipelines", "h3-live-webrtc")):
        print("live webrtc page: skipped: h3-live-webrtc is not built (needs libsoup-3.0-dev and "
              "libgstreamer-plugins-bad1.0-dev; scripts/install-deps.sh)")
        return 77
    server = Server(build, src, ["--silence-timeout", "3"])
    first = second = third = None
    artifact = os.path.join(build, "meson-logs", "live-webrtc-page.png")
    try:
        first = browser()
        first.get(server.url)
        state = "return window.h3Live.state()"
        # Playing: 48 frames painted (two seconds), and chunk times matched to painted frames.
        wait_for(first, "const s = window.h3Live.state(); return s.connected && s.painted >= 48 && "
                 "s.latencies.length >= 2", "the first viewer playing")
        colours = first.execute_script("return window.h3Live.colours()")
        if (colours["width"], colours["height"]) != (256, 160):
            failures.append(f"the frame is {colours['width']}x{colours['height']}, not 256x160")
        if colours["std"] < 1.0:
            failures.append(f"the painted frame is blank (mean {colours['mean']:.1f}, spread {colours['std']:.2f})")
        if all(v > 170 for v in colours["corner"]):
            failures.append(f"before the prompt the background is already white ({colours['corner']})")

        # A second viewer joins, plays and leaves while the first plays on.
        second = browser()
        second.get(server.url)
        wait_for(second, "const s = window.h3Live.state(); return s.connected && s.painted >= 24",
                 "the second viewer playing")
        stats = json.loads(server.request("GET", "/stats")[1])
        if stats["viewers"] != 2:
            failures.append(f"{stats['viewers']} viewers while two watch")
        painted = first.execute_script(state)["painted"]
        second.execute_async_script("window.h3Live.leave().then(arguments[0])")
        second.quit()
        second = None
        stats = json.loads(server.request("GET", "/stats")[1])
        if stats["viewers"] != 1:
            failures.append(f"{stats['viewers']} viewers after the second left, not 1")
        wait_for(first, f"return window.h3Live.state().painted >= {painted + 24}",
                 "the first viewer painting on after the second left")

        # A third vanishes without a word (its browser killed): dropped when its keep-alives stop.
        third = browser()
        third.get(server.url)
        # Its data channel open on the server's side too (the server's hello came over it): only a
        # viewer whose channel opened is dropped for its silence; one killed before that is dropped
        # as one that never connected (which a loaded machine made this test meet once).
        wait_for(third, "const s = window.h3Live.state(); return s.connected && s.viewer !== null",
                 "the third viewer connected, its data channel open")
        for pid in subprocess.run(["pgrep", "-P", str(third.service.process.pid)], capture_output=True,
                                  text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        third.service.stop()
        third = None
        viewers = None
        for _ in range(300):
            viewers = json.loads(server.request("GET", "/stats")[1])["viewers"]
            if viewers == 1:
                break
            time.sleep(0.1)
        if viewers != 1:
            failures.append(f"{viewers} viewers 30 s after the third vanished, not 1")
        if "silent for 3 s" not in server.output():
            removed = [line for line in server.output().splitlines() if " removed: " in line]
            failures.append("the server did not say it dropped the silent viewer; its removals: " +
                            ("; ".join(removed) or "none"))

        # The prompt, typed and sent as a person does; then its applied chunk and the picture.
        first.execute_script(f"window.h3Live.watch({json.dumps(BLUE_ON_WHITE)})")
        box = first.find_element(By.ID, "prompt")
        box.send_keys(BLUE)
        first.find_element(By.ID, "send").click()
        applied = wait_for(first, "return window.h3Live.state().applied.find(a => a.prompt === "
                           f"{json.dumps(BLUE)} && a.shownAt !== undefined) || null",
                           "the applied message for the typed prompt, and its chunk painted")
        sent = first.execute_script(state)["sent"]
        if [(s["prompt"], s["status"]) for s in sent] != [(BLUE, 202)]:
            failures.append(f"the page's prompts and their answers: {sent}")
        seen = wait_for(first, "const w = window.h3Live.watched(); return w && w.seenAt ? w : null",
                        "a blue-on-white frame painted after the prompt")
        first.save_screenshot(artifact)
        if applied and applied["chunk"] < 1:
            failures.append(f"the prompt applied from chunk {applied['chunk']}")
        if applied and seen:
            print(f"live webrtc page: '{BLUE}' applied from chunk {applied['chunk']} (running time "
                  f"{applied['runningTime'] / 1e9:.2f} s); blue on white painted "
                  f"{seen['seenAt'] - seen['armedAt']:.0f} ms after it was sent")
        latencies = first.execute_script(state)["latencies"]
        print(f"live webrtc page: {len(latencies)} chunks' glass latency, median "
              f"{sorted(latencies)[len(latencies) // 2]:.0f} ms; screenshot {artifact}")
        stats = json.loads(server.request("GET", "/stats")[1])
        if (stats["prompts_given"], stats["prompts_applied"]) != (1, 1):
            failures.append(f"prompts given and applied: {stats['prompts_given']}, {stats['prompts_applied']}")
    finally:
        for d in (first, second, third):
            if d is not None:
                d.quit()
        server.stop()
    watch_only(build, src)
    for f in failures:
        print("live webrtc page: FAIL: " + f, file=sys.stderr)
    if failures:
        print(server.output()[-3000:], file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
