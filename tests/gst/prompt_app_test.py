#!/usr/bin/python3
"""Drives pipelines/app/h3_prompt_app.py (the PyGObject application) as a user would: prompts in on
its standard input while its live h3src stream is written to an MP4, then the end of the input.
Checks what it printed from the bus (each prompt sent, each h3-prompt-applied, in order, on later
chunks), the MP4's frames (whole 17-frame chunks, as many as the application counted, at the size
asked for, with a soundtrack), a refused empty prompt, and the error when h3src is not found.
Usage: prompt_app_test.py BUILD_DIR SOURCE_DIR (the environment: tests/gst/meson.build's)."""
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading

CHUNK_FRAMES = 17  # h3/model_clock.h: frames per causal chunk
WIDTH, HEIGHT = 80, 48
# A guard against a hang only (a line that never comes), never a timing assertion.
LINE_GUARD_S = 300


def fail(msg):
    print(f"prompt app test: {msg}", file=sys.stderr)
    sys.exit(1)


class Running:
    """The application with its standard output read line by line on a thread of its own."""

    def __init__(self, cmd, env):
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, pattern):
        """The application's next line, which must match `pattern` (its lines come in a known order)."""
        try:
            line = self.lines.get(timeout=LINE_GUARD_S)
        except queue.Empty:
            self.proc.kill()
            fail(f"no line after {self.seen} (expected one matching {pattern!r})")
        if line is None:
            fail(f"the application ended (stderr: {self.proc.stderr.read()}) before a line matching "
                 f"{pattern!r}; it printed {self.seen}")
        self.seen.append(line)
        m = re.fullmatch(pattern, line)
        if not m:
            self.proc.kill()
            fail(f"the application printed {line!r}, expected a line matching {pattern!r}; before it {self.seen[:-1]}")
        return m

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()


def probe(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                          "stream=codec_type,width,height,nb_read_frames", "-of", "csv=p=0", path],
                         check=True, capture_output=True, text=True).stdout
    return [line.split(",") for line in out.split()]


def main():
    src = sys.argv[2]
    app = os.path.join(src, "pipelines", "app", "h3_prompt_app.py")
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        mp4 = os.path.join(tmp, "live.mp4")
        run = Running([sys.executable, app, "--output", mp4, "--width", str(WIDTH), "--height", str(HEIGHT)], env)
        run.expect(r"first frame")
        run.send("")  # an empty prompt: the element refuses it, the stream goes on
        run.expect(r"refused: ")
        applied = []
        for prompt in ["a blue square on a white background", "a green circle on a black background"]:
            run.send(prompt)
            run.expect(re.escape("sent: " + prompt))
            m = run.expect(r"applied: chunk=(\d+) running-time=(\d+)")
            applied.append((int(m.group(1)), int(m.group(2))))
        run.proc.stdin.close()  # the end of the input ends the stream at its next chunk
        run.expect(r"end of input: ending the stream at its next chunk")
        frames = int(run.expect(r"frames: (\d+)").group(1))
        rc = run.proc.wait(timeout=LINE_GUARD_S)
        stderr = run.proc.stderr.read()
        if rc != 0:
            fail(f"the application exited {rc}: {stderr}")
        (c1, t1), (c2, t2) = applied
        if not (1 <= c1 < c2 and t1 < t2):
            fail(f"the prompts were applied at chunks {c1}, {c2} (running times {t1}, {t2}): "
                 "not on later chunks, in order")
        if frames % CHUNK_FRAMES != 0 or frames < (c2 + 1) * CHUNK_FRAMES:
            fail(f"{frames} frames: not whole chunks through chunk {c2}, the second prompt's")
        streams = {s[0]: s[1:] for s in probe(mp4)}
        if "audio" not in streams:
            fail(f"the MP4 has no soundtrack: {streams}")
        w, h, n = streams["video"]
        if (int(w), int(h), int(n)) != (WIDTH, HEIGHT, frames):
            fail(f"the MP4 holds {n} frames of {w}x{h}; the application counted {frames} of {WIDTH}x{HEIGHT}")
        print(f"prompt app: prompts applied at chunks {c1} and {c2}, {frames} frames written")

        # h3src not found (no plugin folder): a clear error, status 2.
        bare = dict(env, GST_PLUGIN_PATH_1_0=os.path.join(tmp, "no-such-folder"), GST_PLUGIN_SYSTEM_PATH_1_0="",
                    GST_REGISTRY_1_0=os.path.join(tmp, "registry-none.bin"))
        r = subprocess.run([sys.executable, app, "--output", mp4], env=bare, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=LINE_GUARD_S)
        if r.returncode != 2 or "no GStreamer element h3src" not in r.stderr:
            fail(f"without the plugin: status {r.returncode}, stderr {r.stderr!r}")
    print("prompt app test: ok")


if __name__ == "__main__":
    main()
