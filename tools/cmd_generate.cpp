// `h3 generate`: a prompt (or prompt embeddings) in, a YUV4MPEG2 clip out, written chunk by chunk
// as the engine delivers them; with --audio, the soundtrack too (a WAV file, written once the
// last chunk's stretch has come: a RIFF header needs the total length).
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <optional>
#include <vector>

#include "audio/audio_decoder.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/planning/memory_guard.h"
#include "engine/planning/request_lora.h"
#include "h3/error.h"
#include "h3/model_clock.h"
#include "h3/prompt_timeline.h"
#include "io/safetensors.h"
#include "pictures/picture_file.h"
#include "tools/command.h"
#include "tools/progress_bar.h"
#include "tools/y4m_writer.h"

namespace h3::tools {
namespace {

// Writes the frames as they come and keeps each chunk's audio stretch ([n, 2], interleaved, handed
// over after the chunk's frames) for the WAV file; notes when the first frames arrived.
class Y4mSink : public ChunkSink {
 public:
  explicit Y4mSink(Y4mWriter& w) : w_(w) {}
  void on_chunk(const Chunk& c) override {
    if (!first_) first_ = std::chrono::steady_clock::now();
    if (c.frames.defined()) w_.write(c.frames);  // a chunk's audio comes after its frames, alone
    if (c.audio.defined()) {
      if (c.first_sample != samples_) {
        throw Error(ErrorKind::kInternal, "chunk " + std::to_string(c.index) + "'s audio starts at sample " +
                                              std::to_string(c.first_sample) + ", expected " +
                                              std::to_string(samples_));
      }
      samples_ += c.audio.size(0);
      audio_.push_back(c.audio);
    }
  }
  // The soundtrack so far as a waveform [2, samples].
  at::Tensor waveform() const { return at::cat(audio_, 0).t().contiguous(); }
  int64_t samples() const { return samples_; }
  std::optional<std::chrono::steady_clock::time_point> first() const { return first_; }

 private:
  Y4mWriter& w_;
  std::vector<at::Tensor> audio_;
  int64_t samples_ = 0;
  std::optional<std::chrono::steady_clock::time_point> first_;
};

int run(Args& a) {
  EngineOptions eo;
  eo.model_dir = a.string_or("model", "");
  GenerationRequest req;
  req.prompt = a.string_or("prompt", "");
  req.embeds_path = a.string_or("embeds", "");
  req.width = a.int_or("width", 0, 0, kMaxSide);
  req.height = a.int_or("height", 0, 0, kMaxSide);
  req.num_frames = a.int_or("frames", 0, 0, kMaxFrames);
  req.steps = a.int_or("steps", 0, 0, kMaxSteps);
  const std::string sampler = a.string_or("sampler", to_string(Sampler::kEuler));
  req.lora = a.string_or("lora", "");
  req.sink = a.int_or("sink", kDefaultSink, kMinSink, kMaxSink);
  req.window = a.int_or("window", kDefaultWindow, kMinWindow, kMaxWindow);
  const std::string positions = a.string_or("positions", to_string(CausalPositions::kAuto));
  const std::string prompt_switch = a.string_or("prompt-switch", to_string(PromptSwitch::kKeep));
  req.video_shift = a.double_or("video-shift", 0.0);
  if (const auto t = a.opt_string("prompt-timeline")) req.prompt_timeline = read_prompt_timeline(*t);
  req.audio_shift = a.double_or("audio-shift", 0.0);
  req.seed = static_cast<uint64_t>(a.int_or("seed", 0, 0, std::numeric_limits<int64_t>::max()));
  eo.ranks = static_cast<int>(a.int_or("ranks", 1, kMinRanks, kMaxRanks));
  eo.sp = static_cast<int>(a.int_or("sp", 1, 1, kMaxRanks));
  eo.device = a.string_or("device", "cpu");
  eo.free_text_encoder = a.flag("free-text-encoder");
  eo.adaln_tables = !a.flag("no-adaln-tables");
  eo.compute_dtype = a.string_or("compute-dtype", "");
  eo.rendezvous = a.string_or("rendezvous", "");
  eo.world_size = static_cast<int>(a.int_or("world-size", 0, 0, kMaxRanks));
  eo.token_file = a.string_or("token-file", "");
  eo.timeout = std::chrono::seconds(a.int_or("timeout", kDefaultTimeout.count(), 1, 86400));
  if (const auto m = a.opt_string("max-memory")) eo.max_memory = parse_bytes(*m, "--max-memory");
  if (const auto m = a.opt_string("device-memory")) eo.device_memory = parse_bytes(*m, "--device-memory");
  const std::string out = a.string("out");
  const auto save_latents = a.opt_string("save-latents");
  const auto audio_out = a.opt_string("audio");
  req.audio = audio_out.has_value();
  const bool quiet = a.flag("quiet");
  const auto first_frame = a.opt_string("first-frame");
  const auto last_frame = a.opt_string("last-frame");
  const std::vector<std::string> references = a.strings("reference");
  a.finish();
  if (!a.positional().empty()) throw UsageError{"unexpected argument '" + a.positional().front() + "'"};
  req.sampler = parse_sampler(sampler);
  req.positions = parse_causal_positions(positions);
  req.prompt_switch = parse_prompt_switch(prompt_switch);
  if (eo.model_dir.empty()) eo.model_dir = default_model_dir();
  // References are Ref2VA's, whose DiT is transformer_ref/.
  eo.ref2va = !references.empty();
  // A model that cannot serve the pictures refuses before any of them is decoded.
  TaskAsk ask;
  ask.first_frame = first_frame.has_value();
  ask.last_frame = last_frame.has_value();
  ask.references = !references.empty();
  ask.embeddings = !req.embeds_path.empty();
  const int64_t default_frames = check_task(eo, ask);
  if (first_frame) req.first_frame = pictures::read_picture(*first_frame, "--first-frame");
  if (last_frame) req.last_frame = pictures::read_picture(*last_frame, "--last-frame");
  // A video reference is read as far as the clip can use it: the requested or the model's default frames.
  const double seconds = dit::reference_read_seconds(req.num_frames > 0 ? req.num_frames : default_frames);
  for (size_t i = 0; i < references.size(); ++i) {
    req.references.push_back(
        pictures::read_reference(references[i], "--reference " + std::to_string(i + 1), seconds));
  }

  ProgressPrinter printer;
  const ProgressFn progress = quiet ? ProgressFn() : printer.fn();
  check_fit(eo, req);  // before anything is loaded
  auto engine = Engine::open(eo, progress);
  const ClipPlan plan = engine->plan(req);
  for (const auto& w : plan.warnings) std::fprintf(stderr, "h3 generate: warning: %s\n", w.c_str());
  // A file is written, not watched: the positions' warning is told up front too.
  if (!plan.positions_warning.empty()) {
    std::fprintf(stderr, "h3 generate: warning: %s\n", plan.positions_warning.c_str());
  }
  if (!quiet && plan.sampler == Sampler::kCausal) {
    const std::string lora = request_lora(engine->model(), req);
    std::fprintf(stderr,
                 "h3 generate: causal sampler: %lld chunks of %lld forwards, sink %lld, window %lld, shifts "
                 "%g / %g, positions %s, prompt switch %s%s%s\n",
                 (long long)plan.causal_chunks, (long long)plan.steps, (long long)req.sink,
                 (long long)req.window, plan.video_shift, plan.audio_shift, to_string(req.positions),
                 to_string(req.prompt_switch), lora.empty() ? "" : ", LoRA ", lora.c_str());
  }
  if (!quiet) {
    std::fprintf(
        stderr,
        "h3 generate: %s: %lldx%lld, %lld frames at %d/%d fps (canvas %lldx%lld, %lld latent frames, %lld "
        "generated), %lld grid points, seed %llu, %d rank(s), %s\n",
        eo.model_dir.c_str(), (long long)plan.width, (long long)plan.height, (long long)plan.num_frames,
        plan.fps_n, plan.fps_d, (long long)plan.canvas_width, (long long)plan.canvas_height,
        (long long)plan.latent_frames, (long long)plan.generated_frames, (long long)plan.steps,
        (unsigned long long)req.seed, eo.rendezvous.empty() ? eo.ranks : eo.world_size,
        engine->compute_dtype().c_str());
    const MemoryEstimate m = engine->memory_estimate(plan);
    if (eo.device == "cuda") {
      std::fprintf(stderr,
                   "h3 generate: host memory beside the weights: about %s (frames of a clip %s, state %s, "
                   "margin %s; the %lld rows' work is on the GPUs)\n",
                   format_bytes(m.peak()).c_str(), format_bytes(m.decode_bytes).c_str(),
                   format_bytes(m.state_bytes).c_str(), format_bytes(m.margin_bytes).c_str(),
                   (long long)m.dit_rows);
    } else {
      std::fprintf(stderr,
                   "h3 generate: memory beside the weights: about %s (DiT %s over %lld rows, decode %s, "
                   "state %s, margin %s)\n",
                   format_bytes(m.peak()).c_str(), format_bytes(m.dit_bytes).c_str(), (long long)m.dit_rows,
                   format_bytes(m.decode_bytes).c_str(), format_bytes(m.state_bytes).c_str(),
                   format_bytes(m.margin_bytes).c_str());
    }
  }
  Y4mWriter writer(out, plan.width, plan.height, plan.fps_n, plan.fps_d);
  Y4mSink sink(writer);
  GenerateExtras extras;
  if (save_latents) {
    extras.on_latents = [&](const at::Tensor& video, const at::Tensor& audio) {
      io::write_safetensors(*save_latents, {{"video", video}, {"audio", audio}},
                            {{"seed", std::to_string(req.seed)}, {"steps", std::to_string(plan.steps)}});
    };
  }
  StreamControl cancel;
  const auto t0 = std::chrono::steady_clock::now();
  engine->generate(req, sink, progress, cancel, extras);
  printer.finish();
  writer.close();
  if (audio_out) audio::write_wav(*audio_out, sink.waveform(), static_cast<int>(plan.audio_rate));
  if (!quiet) {
    std::fprintf(stderr, "h3 generate: wrote %lld frames to %s\n", (long long)writer.frames_written(),
                 out.c_str());
    if (audio_out) {
      std::fprintf(stderr, "h3 generate: wrote %lld stereo samples (%.3f s at %d Hz) to %s\n",
                   (long long)sink.samples(),
                   static_cast<double>(sink.samples()) / static_cast<double>(plan.audio_rate),
                   static_cast<int>(plan.audio_rate), audio_out->c_str());
    }
    if (sink.first()) {
      // The first chunk's frames; with --audio its soundtrack's stretch follows them.
      std::fprintf(stderr, "h3 generate: first frames after %.3f s\n",
                   std::chrono::duration<double>(*sink.first() - t0).count());
    }
  }
  return 0;
}

H3_REGISTER_COMMAND(
    "generate", "a prompt or prompt embeddings in, a YUV4MPEG2 clip out (streamed chunk by chunk)",
    "usage: h3 generate [--model DIR] (--prompt TEXT | --embeds FILE) [--width W] [--height H]\n"
    "                   [--frames F] [--steps N] [--seed S] [--ranks R] [--sp N] --out FILE.y4m\n"
    "                   [--first-frame PICTURE] [--last-frame PICTURE] [--reference FILE ...]\n"
    "                   [--sampler euler|causal] [--lora FILE] [--sink N] [--window N]\n"
    "                   [--positions auto|absolute|relative] [--prompt-switch keep|recache]\n"
    "                   [--video-shift S] [--audio-shift S] [--prompt-timeline FILE]\n"
    "                   [--audio FILE.wav] [--save-latents FILE] [--device cpu|cuda] [--free-text-encoder]\n"
    "                   [--compute-dtype fp32|bf16] [--no-adaln-tables] [--timeout S] [--max-memory BYTES]\n"
    "                   [--device-memory BYTES]\n"
    "                   [--quiet]\n"
    "                   [--rendezvous HOST:PORT --world-size N --token-file FILE]\n"
    "\n"
    "  --model DIR          model folder (release layout); default: the tiny default model\n"
    "                       ($H3_MODEL_DIR, else the installed or build tree's copy)\n"
    "  --prompt TEXT        prompt, for a model with its own text encoder (text_encoder/ + tokenizer/,\n"
    "                       as released and in the tiny models)\n"
    "  --embeds FILE        precomputed prompt embeddings: safetensors with `embeds` [L, text_dim]\n"
    "                       (bf16 or fp32) and optionally `tags` [L] (h3 encode-prompt writes one)\n"
    "  --width W --height H output size in pixels (16..4096; the model computes on a canvas rounded up\n"
    "                       to multiples of 32 and crops); 0 or absent: the model default\n"
    "  --first-frame PICTURE --last-frame PICTURE  FL2VA: the clip starts from / ends on this picture\n"
    "                       (either or both; a file or URI in any format GStreamer decodes, a video's\n"
    "                       first frame). Without --width/--height the canvas follows the first one's\n"
    "                       aspect ratio at the model's size; the first is stretched onto it, the last\n"
    "                       scaled to cover it and centre-cropped. Needs a model with FL2VA's condition\n"
    "                       path (a VAE encoder, a vision tower) and the euler sampler\n"
    "  --reference FILE     Ref2VA: an image reference (a subject, style or scene; up to 9), a video\n"
    "                       reference (motion, camera; up to 3) or an audio reference (a voice, music;\n"
    "                       up to 3, never alone), a file or URI GStreamer decodes (one picture: an\n"
    "                       image, more: a video, sound alone: audio); repeat it, in the order the\n"
    "                       model reads them. An image is encoded at its own size (short edge 2048 in\n"
    "                       the release), a video at 24 fps on the canvas of its own aspect ratio with\n"
    "                       its soundtrack, sound by the audio VAE's encoder at its rate, cut to the\n"
    "                       clip; the clip's canvas stays the request's. Reads Ref2VA's DiT\n"
    "                       (transformer_ref/) instead of transformer/; the euler sampler\n"
    "  --frames F           exact output frame count (1..1024; generated as 17n+5 and trimmed)\n"
    "  --steps N            euler: grid points of the sampling schedule (>= 2; N - 1 denoiser\n"
    "                       evaluations); causal: forwards per 17-frame chunk (default 4)\n"
    "  --sampler euler|causal  euler (default): the release's sampler over the whole clip, frames\n"
    "                       after the last step; causal: RAVEN-Streaming's chunk-causal sampler, each\n"
    "                       chunk finished against a KV cache and decoded at once (docs/causal.md)\n"
    "  --lora FILE          a PEFT LoRA (adapter_model.safetensors or its folder) on the DiT, e.g.\n"
    "                       RAVEN-Streaming's for --sampler causal or a step-distilled one; without\n"
    "                       it, --sampler causal takes the model's own causal adapter where it ships\n"
    "                       one (MODEL/causal-lora/: the embedded default does); `none`: no adapter\n"
    "  --sink N             causal: KV-cache records pinned, the text first (default 2)\n"
    "  --window N           causal: recent chunks kept in the KV cache (default 2; -1: all)\n"
    "  --positions auto|absolute|relative  causal: where chunks sit on the DiT's clock; relative moves\n"
    "                       the window and the current chunk back (3 chunks at a time) once the clip\n"
    "                       passes the model's default length; auto (default): relative for an endless\n"
    "                       stream, absolute for a clip (docs/causal.md \"Positions\")\n"
    "  --prompt-switch keep|recache  causal: at a prompt change the kept chunks' KV records stay as\n"
    "                       they were (keep, default) or are recomputed under the new prompt (recache)\n"
    "  --video-shift S --audio-shift S  causal: the grids' shifts (default: the model's, 12 and 3)\n"
    "  --prompt-timeline FILE  causal: `SECONDS PROMPT` lines, prompts that take over at those times\n"
    "                       (each from the first chunk that starts at or after it)\n"
    "  --seed S             noise seed (default 0)\n"
    "  --ranks R            ranks as threads; the DiT runs tensor-parallel over them (default 1)\n"
    "  --sp N               of those (or of --world-size), N split the DiT's rows (Ulysses sequence\n"
    "                       parallelism) and ranks / N its weights (default 1); N must divide the\n"
    "                       heads each tensor-parallel rank holds\n"
    "  --out FILE.y4m       YUV4MPEG2 output (C444, BT.601 limited range, 24 fps); '-' = stdout\n"
    "  --audio FILE.wav     also decode the soundtrack (needs the model's audio_vae/) and write it as\n"
    "                       a stereo WAV at the model's rate (the release: 32 kHz and round(F * 5 / 3)\n"
    "                       * 800 samples, which differ from the video's F / 24 s by at most 12.5 ms)\n"
    "  --save-latents FILE  also write the final `video` and `audio` latents (before decoding)\n"
    "  --device cpu|cuda    where the DiT and the VAE run (cuda: rank r on cuda:r, NCCL between ranks)\n"
    "  --free-text-encoder  drop the text encoder's weights once the prompt is encoded (the DiT\n"
    "                       and the VAE get the memory; a later prompt reads them again)\n"
    "  --compute-dtype fp32|bf16  the DiT's and the text encoder's precision (the VAEs stay fp32);\n"
    "                       default: fp32 on cpu, bf16 on cuda. bf16 halves the DiT's weight memory;\n"
    "                       on a CPU without AMX-BF16/AVX-512-BF16 it is emulated, slower than fp32\n"
    "  --no-adaln-tables    keep the DiT's AdaLN projections and compute their rows every step;\n"
    "                       default: computed once per grid and the projections dropped (13 of the\n"
    "                       release's 33 B parameters), the same output bit for bit\n"
    "  --timeout S          bound on every collective and on joining the ranks (default 120)\n"
    "  --max-memory BYTES   the most a request may take beside the weights (8G, 512M, ...); default:\n"
    "                       what the machine has available. A request estimated above it is refused\n"
    "                       before anything is allocated, naming the length and size that would fit\n"
    "  --device-memory BYTES  each rank's device memory for the fit planner (80G, ...); default: on\n"
    "                       cuda the GPU's. A request whose tp x sp layout cannot fit is refused\n"
    "                       before the model is loaded, naming a layout that would (`h3 plan`)\n"
    "  --rendezvous HOST:PORT  be rank 0 of a world of processes: serve the rendezvous store on\n"
    "                       exactly this address; ranks 1..N-1 are `h3 worker`s (docs/distributed.md)\n"
    "  --world-size N       with --rendezvous: every rank, this one included (>= 2)\n"
    "  --token-file FILE    with --rendezvous: the shared token (chmod 600); workers must present it\n"
    "  --quiet              no progress on stderr\n"
    "\n"
    "Progress goes to stderr: a bar on a terminal, plain lines otherwise.",
    run);

}  // namespace
}  // namespace h3::tools
