#!/usr/bin/python3
"""A PyGObject application around h3src (docs/element.md): a live causal stream into a window or an
MP4 file whose prompt changes from standard input, one prompt a line.

Each line read becomes an `h3-prompt` event for the stream (from its next chunk); the element's
`h3-prompt-applied` bus messages are printed as they come. The end of the input ends the stream at
its next chunk boundary (EOS), so that the file is finalised with whole chunks.

Prints, one line each: `first frame`, `sent: PROMPT` (or `refused: PROMPT`),
`applied: chunk=C running-time=NS`, and at the end `frames: N`.
Exit status: 0 after EOS, 1 on a pipeline error, 2 when h3src is not found.
"""
import argparse
import os
import sys

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GLib, Gst  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--output", metavar="FILE.mp4", help="write H.264 video and AAC audio into this MP4")
    where.add_argument("--window", action="store_true", help="show the stream (autovideosink, autoaudiosink)")
    p.add_argument("--prompt", help="the first prompt (default: the element's)")
    p.add_argument("--width", type=int, default=80)
    p.add_argument("--height", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", help="the model folder (default: the installed default model)")
    return p.parse_args()


class App:
    def __init__(self, args):
        self.loop = GLib.MainLoop()
        self.status = 0
        self.frames = 0
        self.stdin_watch = None
        self.pipeline = Gst.Pipeline.new("h3-prompt-app")
        self.src = self.make("h3src", "src")
        self.src.set_property("sampler", "causal")
        self.src.set_property("is-live", True)
        self.src.set_property("num-frames", -1)  # endless: the input's end ends it
        self.src.set_property("width", args.width)
        self.src.set_property("height", args.height)
        self.src.set_property("seed", args.seed)
        if args.prompt:
            self.src.set_property("prompt", args.prompt)
        if args.model:
            self.src.set_property("model", args.model)
        if args.output:
            video = ["queue", "videoconvert", "x264enc", "mux"]
            audio = ["queue", "audioconvert", "avenc_aac", "mux"]
            mux = self.make("mp4mux", "mux")
            sink = self.make("filesink", "file")
            sink.set_property("location", args.output)
            mux.link(sink)
        else:
            video = ["queue", "videoconvert", "autovideosink"]
            audio = ["queue", "audioconvert", "autoaudiosink"]
        self.chain("video", video)
        self.chain("audio", audio)
        pad = self.src.get_static_pad("video")
        pad.add_probe(Gst.PadProbeType.BUFFER, self.on_buffer)
        bus = self.pipeline.get_bus()
        bus.add_signal_watch()
        bus.connect("message", self.on_message)

    def make(self, factory, name=None):
        e = Gst.ElementFactory.make(factory, name)
        if e is None:
            raise RuntimeError(f"no GStreamer element {factory}")
        self.pipeline.add(e)
        return e

    def chain(self, pad_name, factories):
        prev = self.src.get_static_pad(pad_name)
        for f in factories:
            e = self.pipeline.get_by_name(f) if f == "mux" else self.make(f)
            sinkpad = e.request_pad_simple(f"{pad_name}_%u") if f == "mux" else e.get_static_pad("sink")
            if prev.link(sinkpad) != Gst.PadLinkReturn.OK:
                raise RuntimeError(f"cannot link h3src's {pad_name} pad to {f}")
            prev = e.get_static_pad("src")

    def on_buffer(self, pad, info):
        self.frames += 1
        if self.frames == 1:
            GLib.idle_add(self.start_reading)
        return Gst.PadProbeReturn.OK

    def start_reading(self):
        # Only once the stream runs: before its first frame the element refuses a prompt change.
        print("first frame", flush=True)
        channel = GLib.IOChannel.unix_new(sys.stdin.fileno())
        self.stdin_watch = GLib.io_add_watch(channel, GLib.PRIORITY_DEFAULT,
                                             GLib.IOCondition.IN | GLib.IOCondition.HUP, self.on_stdin)
        return False

    def on_stdin(self, channel, condition):
        line = sys.stdin.readline()
        if line == "":
            print("end of input: ending the stream at its next chunk", flush=True)
            self.pipeline.send_event(Gst.Event.new_eos())
            return False
        prompt = line.rstrip("\r\n")
        s = Gst.Structure.new_empty("h3-prompt")
        s.set_value("prompt", prompt)
        ok = self.src.send_event(Gst.Event.new_custom(Gst.EventType.CUSTOM_UPSTREAM, s))
        print(("sent: " if ok else "refused: ") + prompt, flush=True)
        return True

    def on_message(self, bus, msg):
        t = msg.type
        if t == Gst.MessageType.ELEMENT:
            s = msg.get_structure()
            if s is not None and s.get_name() == "h3-prompt-applied":
                _, chunk = s.get_int64("chunk")
                _, rt = s.get_uint64("running-time")
                print(f"applied: chunk={chunk} running-time={rt}", flush=True)
        elif t == Gst.MessageType.ERROR:
            err, dbg = msg.parse_error()
            print(f"error from {msg.src.get_name()}: {err.message}\n{dbg or ''}", file=sys.stderr, flush=True)
            self.status = 1
            self.loop.quit()
        elif t == Gst.MessageType.WARNING:
            w, _ = msg.parse_warning()
            print(f"warning from {msg.src.get_name()}: {w.message}", file=sys.stderr, flush=True)
        elif t == Gst.MessageType.EOS:
            self.loop.quit()
        return True

    def run(self):
        if self.pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
            self.status = 1
        else:
            self.loop.run()
        self.pipeline.set_state(Gst.State.NULL)
        print(f"frames: {self.frames}", flush=True)
        return self.status


def main():
    args = parse_args()
    Gst.init(None)
    if Gst.ElementFactory.find("h3src") is None:
        print("no GStreamer element h3src: the h3 plugin (libgsth3.so) is not in GStreamer's plugin folders; "
              "install gst-h3 or set GST_PLUGIN_PATH to the folder that holds libgsth3.so", file=sys.stderr)
        return 2
    try:
        app = App(args)
    except RuntimeError as e:
        print(str(e), file=sys.stderr)
        return 2
    return app.run()


if __name__ == "__main__":
    sys.exit(main())
