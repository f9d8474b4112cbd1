// `h3 replay FILE.mp4`: makes a marked stream again (docs/element.md, "Marking"). It reads the
// record h3mark wrote into the file's XMP and the prompt track h3src's `prompts` pad wrote, checks
// that they agree and that --model holds the weights the record names (their SHA-256), and runs
// the same request with the record's prompt changes as a prompt timeline at the chunks they took
// over: on the same build and CPU the frames and the soundtrack come out byte for byte as the
// element pushed them (RGB, F32LE). What differs is refused, named, before the model is loaded.
#include <ATen/ATen.h>
#include <gst/app/gstappsink.h>
#include <gst/gst.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "h3/error.h"
#include "h3/model_clock.h"
#include "h3/model_lora.h"
#include "marking/model_digest.h"
#include "marking/xmp.h"
#include "tools/command.h"
#include "tools/progress_bar.h"

namespace h3::tools {
namespace {

struct TextSample {
  GstClockTime pts = 0, duration = 0;
  std::string text;
};

// The file's timed text (the first text track qtdemux finds), through GStreamer: qtdemux reads
// tx3g. `found` is false when the file has no text track. The other tracks stay unlinked: qtdemux
// goes on while one of its pads is linked.
struct TrackReader {
  GstElement* pipeline = nullptr;
  GstElement* queue = nullptr;
  bool linked = false, no_more_pads = false;
};

void on_pad_added(GstElement*, GstPad* pad, gpointer data) {
  auto* t = static_cast<TrackReader*>(data);
  GstCaps* caps = gst_pad_get_current_caps(pad);
  if (!caps) caps = gst_pad_query_caps(pad, nullptr);
  const bool text = caps && gst_caps_get_size(caps) > 0 &&
                    g_str_has_prefix(gst_structure_get_name(gst_caps_get_structure(caps, 0)), "text/");
  if (caps) gst_caps_unref(caps);
  if (!text || t->linked) return;
  GstPad* sink = gst_element_get_static_pad(t->queue, "sink");
  t->linked = gst_pad_link(pad, sink) == GST_PAD_LINK_OK;
  gst_object_unref(sink);
}

void on_no_more_pads(GstElement*, gpointer data) {
  static_cast<TrackReader*>(data)->no_more_pads = true;
}

std::vector<TextSample> read_prompt_track(const std::string& path, bool* found) {
  GError* error = nullptr;
  GstElement* pipeline = gst_parse_launch(
      "filesrc name=src ! qtdemux name=demux  queue name=q ! appsink name=text sync=false", &error);
  if (!pipeline) {
    const std::string why = error ? error->message : "unknown";
    g_clear_error(&error);
    throw Error(ErrorKind::kInternal, "cannot build the demuxing pipeline: " + why);
  }
  std::unique_ptr<GstElement, void (*)(GstElement*)> hold(pipeline, [](GstElement* p) {
    gst_element_set_state(p, GST_STATE_NULL);
    gst_object_unref(p);
  });
  TrackReader reader;
  reader.pipeline = pipeline;
  reader.queue = gst_bin_get_by_name(GST_BIN(pipeline), "q");
  GstElement* src = gst_bin_get_by_name(GST_BIN(pipeline), "src");
  g_object_set(src, "location", path.c_str(), nullptr);
  gst_object_unref(src);
  GstElement* demux = gst_bin_get_by_name(GST_BIN(pipeline), "demux");
  g_signal_connect(demux, "pad-added", G_CALLBACK(on_pad_added), &reader);
  g_signal_connect(demux, "no-more-pads", G_CALLBACK(on_no_more_pads), &reader);
  gst_object_unref(demux);
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "text");
  std::vector<TextSample> samples;
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstBus* bus = gst_element_get_bus(pipeline);
  std::string failure;
  for (;;) {
    GstSample* s = gst_app_sink_try_pull_sample(GST_APP_SINK(sink), 50 * GST_MSECOND);
    if (s) {
      GstBuffer* b = gst_sample_get_buffer(s);
      GstMapInfo map;
      if (b && gst_buffer_map(b, &map, GST_MAP_READ)) {
        samples.push_back({GST_BUFFER_PTS(b), GST_BUFFER_DURATION(b),
                           std::string(reinterpret_cast<const char*>(map.data), map.size)});
        gst_buffer_unmap(b, &map);
      }
      gst_sample_unref(s);
      continue;
    }
    if (gst_app_sink_is_eos(GST_APP_SINK(sink))) break;
    if (reader.no_more_pads && !reader.linked) break;
    if (GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR)) {
      GError* e = nullptr;
      gst_message_parse_error(m, &e, nullptr);
      failure = e ? e->message : "unknown";
      g_clear_error(&e);
      gst_message_unref(m);
      break;
    }
  }
  gst_object_unref(bus);
  gst_object_unref(sink);
  gst_object_unref(reader.queue);
  if (!failure.empty()) throw Error(ErrorKind::kFormat, path + " cannot be read as MP4: " + failure);
  *found = reader.linked;
  return samples;
}

std::string quoted(const std::string& s) {
  std::string q = s.size() > 60 ? s.substr(0, 60) + "..." : s;
  for (char& c : q)
    if (c == '\n' || c == '\r') c = ' ';
  return "'" + q + "'";
}

// The record of the file's h3mark packet; refuses a file without one, or with several.
marking::Record read_record(const std::string& path) {
  std::vector<std::string> ours;
  for (std::string& p : marking::mp4_xmp_packets(path))
    if (marking::has_record(p)) ours.push_back(std::move(p));
  if (ours.empty()) {
    throw Error(ErrorKind::kNotFound, path +
                                          " carries no h3 marking (no XMP packet with an h3:Record): it was "
                                          "not written through h3mark, or its marking was removed");
  }
  if (ours.size() > 1) {
    throw Error(ErrorKind::kInvalidArgument,
                path + " carries " + std::to_string(ours.size()) +
                    " h3 records (several streams into one file): which one to make "
                    "again is not known");
  }
  return marking::record_from_xmp(ours.front(), path);
}

// The prompt of chunk k by the record.
std::string prompt_at(const marking::Record& r, int64_t k) {
  std::string p = r.prompt;
  for (const auto& c : r.changes)
    if (c.chunk <= k) p = c.prompt;
  return p;
}

std::string track_text(const std::string& prompt) {
  // gst/prompt_pad.h: a prompt over 65000 bytes goes into the track cut, with "…".
  constexpr size_t kMax = 65000;
  if (prompt.size() <= kMax) return prompt;
  size_t end = kMax;
  while (end > 0 && (static_cast<unsigned char>(prompt[end]) & 0xC0) == 0x80) --end;
  return prompt.substr(0, end) + "\xE2\x80\xA6";
}

// The track must hold, for each 17-frame chunk, the prompt the record gives it, at the chunk's
// first frame's time.
void check_track(const std::string& path, const marking::Record& r, const std::vector<TextSample>& track) {
  const int64_t chunks = (r.num_frames + dit::kChunkFrames - 1) / dit::kChunkFrames;
  if (static_cast<int64_t>(track.size()) != chunks) {
    throw Error(ErrorKind::kMismatch, path + "'s prompt track has " + std::to_string(track.size()) +
                                          " samples, its h3 record's " + std::to_string(r.num_frames) +
                                          " frames make " + std::to_string(chunks) +
                                          " chunks: the track or the record was altered; refusing to replay");
  }
  for (int64_t k = 0; k < chunks; ++k) {
    const GstClockTime at =
        gst_util_uint64_scale(static_cast<guint64>(k * dit::kChunkFrames),
                              static_cast<guint64>(r.fps_d) * GST_SECOND, static_cast<guint64>(r.fps_n));
    const TextSample& s = track[static_cast<size_t>(k)];
    const std::string want = track_text(prompt_at(r, k));
    char when[32];
    std::snprintf(when, sizeof when, "%.3f s", static_cast<double>(s.pts) / GST_SECOND);
    // mp4mux keeps a text track's times in milliseconds (its trak timescale 1000): 0.5 ms off at most.
    const GstClockTimeDiff off = GST_CLOCK_DIFF(at, s.pts);
    if (off > static_cast<GstClockTimeDiff>(GST_MSECOND) ||
        off < -static_cast<GstClockTimeDiff>(GST_MSECOND)) {
      char expected[32];
      std::snprintf(expected, sizeof expected, "%.3f s", static_cast<double>(at) / GST_SECOND);
      throw Error(ErrorKind::kMismatch, path + "'s prompt track sample " + std::to_string(k + 1) + " is at " +
                                            when + ", chunk " + std::to_string(k) + " starts at " + expected +
                                            ": the track was altered; refusing to replay");
    }
    if (s.text != want) {
      throw Error(ErrorKind::kMismatch, path + "'s prompt track sample " + std::to_string(k + 1) +
                                            " (chunk " + std::to_string(k) + ", " + when + ") reads " +
                                            quoted(s.text) + " where the h3 record has " + quoted(want) +
                                            ": the track or the record was altered; refusing to replay");
    }
  }
}

// Writes the frames (packed RGB) and the soundtrack (interleaved F32LE) as they come.
class RawSink : public ChunkSink {
 public:
  RawSink(FILE* video, FILE* audio) : video_(video), audio_(audio) {}
  void on_chunk(const Chunk& c) override {
    if (c.frames.defined()) {
      const at::Tensor f = c.frames.contiguous();
      write(video_, f.data_ptr(), static_cast<size_t>(f.numel()));
      frames_ += f.size(0);
    }
    if (c.audio.defined() && audio_) {
      const at::Tensor a = c.audio.to(at::kFloat).contiguous();
      write(audio_, a.data_ptr(), static_cast<size_t>(a.numel()) * sizeof(float));
      samples_ += a.size(0);
    }
  }
  int64_t frames() const { return frames_; }
  int64_t samples() const { return samples_; }

 private:
  static void write(FILE* f, const void* data, size_t n) {
    if (std::fwrite(data, 1, n, f) != n) throw Error(ErrorKind::kCallback, "writing the output failed");
  }
  FILE* video_;
  FILE* audio_;
  int64_t frames_ = 0, samples_ = 0;
};

int run(Args& a) {
  const std::string model = a.string_or("model", "");
  const std::string video_out = a.string("video");
  const auto audio_out = a.opt_string("audio");
  const auto lora = a.opt_string("lora");
  const bool quiet = a.flag("quiet");
  a.finish();
  if (a.positional().size() != 1) throw UsageError{"h3 replay takes one file, the MP4 to make again"};
  const std::string path = a.positional().front();
  gst_init(nullptr, nullptr);  // qtdemux reads the prompt track

  const marking::Record r = read_record(path);
  if (!r.prompt_embeds.empty()) {
    throw Error(ErrorKind::kInvalidArgument, path + " was made from prompt embeddings (" + r.prompt_embeds +
                                                 "), which the file does not hold");
  }
  if (!r.conditioning.empty()) {
    throw Error(ErrorKind::kInvalidArgument,
                path + " was conditioned on " + r.conditioning.front() + ", which the file does not hold");
  }
  if (r.num_frames < 0) {
    throw Error(ErrorKind::kInvalidArgument,
                path +
                    " is an endless stream (num-frames -1): h3 replay makes clips of a "
                    "planned length again");
  }
  if (audio_out && !r.audio) {
    throw Error(ErrorKind::kInvalidArgument,
                path + " was made by " + r.element + ", without a soundtrack: leave out --audio");
  }
  bool have_track = false;
  const std::vector<TextSample> track = read_prompt_track(path, &have_track);
  if (!have_track) {
    throw Error(ErrorKind::kNotFound,
                path +
                    " has no prompt track (h3src's `prompts` pad into the muxer): which "
                    "prompt each chunk had cannot be checked");
  }
  check_track(path, r, track);

  EngineOptions eo;
  eo.model_dir = model.empty() ? default_model_dir() : model;
  const std::string sha = marking::model_sha256(eo.model_dir);
  if (sha != r.model_sha256) {
    throw Error(ErrorKind::kMismatch,
                path + " was made by model '" + r.model_name + "' (sha256 " + r.model_sha256 + "); " +
                    eo.model_dir + " hashes to " + sha +
                    ": not the same weights. Pass --model with the folder that made it");
  }
  GenerationRequest req;
  if (r.lora_name == kNoLora && r.lora_sha256.empty()) {
    req.lora = kNoLora;  // made with lora=none: the model bare, not its own causal adapter
  } else if (!r.lora_name.empty()) {
    if (!lora) {
      throw Error(ErrorKind::kInvalidArgument, path + " was made with the LoRA '" + r.lora_name +
                                                   "' (sha256 " + r.lora_sha256 + "): pass it with --lora");
    }
    const std::string lora_sha = marking::model_sha256(*lora);
    if (lora_sha != r.lora_sha256) {
      throw Error(ErrorKind::kMismatch, path + " was made with the LoRA '" + r.lora_name + "' (sha256 " +
                                            r.lora_sha256 + "); " + *lora + " hashes to " + lora_sha);
    }
    req.lora = *lora;
  }
  eo.ranks = static_cast<int>(r.ranks);
  eo.tp = static_cast<int>(r.tp);
  eo.sp = static_cast<int>(r.sp);
  eo.device = r.device;
  eo.compute_dtype = r.compute_dtype;
  eo.adaln_tables = r.adaln_tables;
  req.prompt = r.prompt;
  req.width = r.width;
  req.height = r.height;
  req.num_frames = r.num_frames;
  req.steps = r.steps;
  req.seed = r.seed;
  req.sampler = parse_sampler(r.sampler);
  req.sink = r.sink;
  req.window = r.window;
  req.positions = parse_causal_positions(r.positions);
  req.prompt_switch = parse_prompt_switch(r.prompt_switch);
  req.audio = audio_out.has_value();
  // Each change at the start of the chunk it took over: the engine applies a timeline's entry
  // from the first chunk starting at or after it, the very chunk.
  for (const auto& c : r.changes)
    req.prompt_timeline.push_back({dit::chunk_start_seconds(c.chunk), c.prompt});

  std::unique_ptr<FILE, int (*)(FILE*)> video(std::fopen(video_out.c_str(), "wb"), &std::fclose);
  if (!video) throw Error(ErrorKind::kNotFound, "cannot write " + video_out);
  std::unique_ptr<FILE, int (*)(FILE*)> audio(audio_out ? std::fopen(audio_out->c_str(), "wb") : nullptr,
                                              [](FILE* f) { return f ? std::fclose(f) : 0; });
  if (audio_out && !audio) throw Error(ErrorKind::kNotFound, "cannot write " + *audio_out);

  ProgressPrinter printer;
  const ProgressFn progress = quiet ? ProgressFn() : printer.fn();
  auto engine = Engine::open(eo, progress);
  RawSink sink(video.get(), audio.get());
  StreamControl control;
  engine->generate(req, sink, progress, control);
  printer.finish();
  if (!quiet) {
    std::fprintf(stderr, "h3 replay: %s: %lld frames (%lldx%lld RGB) to %s", path.c_str(),
                 (long long)sink.frames(), (long long)r.width, (long long)r.height, video_out.c_str());
    if (audio_out)
      std::fprintf(stderr, ", %lld stereo F32LE samples to %s", (long long)sink.samples(),
                   audio_out->c_str());
    std::fprintf(stderr, "; %zu prompt change(s)\n", r.changes.size());
  }
  return 0;
}

}  // namespace

H3_REGISTER_COMMAND(
    "replay", "makes a marked MP4's stream again from its h3 record and prompt track",
    "usage: h3 replay FILE.mp4 --video OUT.rgb [--audio OUT.f32] [--model DIR] [--lora FILE] [--quiet]\n"
    "\n"
    "  FILE.mp4         an MP4 written through h3mark (its XMP holds the stream's h3 record), with\n"
    "                   h3src's `prompts` pad as its text track\n"
    "  --video OUT.rgb  the frames as the element pushed them with format=RGB: packed 8-bit RGB,\n"
    "                   frame after frame, width x height x 3 bytes each\n"
    "  --audio OUT.f32  the soundtrack as h3src pushed it with format=F32LE: interleaved stereo\n"
    "                   32-bit floats at the model's rate (only for a stream h3src made)\n"
    "  --model DIR      the model folder (default: the tiny default model); its weights' SHA-256\n"
    "                   must be the record's, or nothing runs\n"
    "  --lora FILE      the LoRA the record names (its SHA-256 is checked too)\n"
    "\n"
    "Refused, before the model loads, naming what differs: a file without an h3 record or with\n"
    "several, a record with a field missing, a prompt track that is missing or disagrees with the\n"
    "record, other weights, a stream made from prompt embeddings, pictures or references, an endless\n"
    "stream. The same build on the same CPU gives the same bytes; the record's ranks, tp, sp,\n"
    "device and compute dtype are used as they were.\n",
    run);

}  // namespace h3::tools
