// `h3 generate`: a prompt (or prompt embeddings) in, a YUV4MPEG2 clip out, written chunk by chunk
// as the engine delivers them.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <limits>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/y4m_writer.h"
#include "io/safetensors.h"
#include "tools/command.h"
#include "tools/progress_bar.h"

namespace h3::tools {
namespace {

class Y4mSink : public ChunkSink {
 public:
  explicit Y4mSink(Y4mWriter& w) : w_(w) {}
  void on_chunk(const Chunk& c) override { w_.write(c.frames); }

 private:
  Y4mWriter& w_;
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
  req.seed = static_cast<uint64_t>(a.int_or("seed", 0, 0, std::numeric_limits<int64_t>::max()));
  eo.ranks = static_cast<int>(a.int_or("ranks", 1, kMinRanks, kMaxRanks));
  eo.device = a.string_or("device", "cpu");
  eo.rendezvous = a.string_or("rendezvous", "");
  eo.world_size = static_cast<int>(a.int_or("world-size", 0, 0, kMaxRanks));
  eo.token_file = a.string_or("token-file", "");
  eo.timeout = std::chrono::seconds(a.int_or("timeout", kDefaultTimeout.count(), 1, 86400));
  const std::string out = a.string("out");
  const auto save_latents = a.opt_string("save-latents");
  const bool quiet = a.flag("quiet");
  a.finish();
  if (!a.positional().empty()) throw UsageError{"unexpected argument '" + a.positional().front() + "'"};
  if (eo.model_dir.empty()) eo.model_dir = default_model_dir();

  ProgressPrinter printer;
  const ProgressFn progress = quiet ? ProgressFn() : printer.fn();
  auto engine = Engine::open(eo, progress);
  const ClipPlan plan = engine->plan(req);
  if (!quiet) {
    std::fprintf(
        stderr,
        "h3 generate: %s: %lldx%lld, %lld frames at %d/%d fps (canvas %lldx%lld, %lld latent frames, %lld "
        "generated), %lld grid points, seed %llu, %d rank(s)\n",
        eo.model_dir.c_str(), (long long)plan.width, (long long)plan.height, (long long)plan.num_frames,
        plan.fps_n, plan.fps_d, (long long)plan.canvas_width, (long long)plan.canvas_height,
        (long long)plan.latent_frames, (long long)plan.generated_frames, (long long)plan.steps,
        (unsigned long long)req.seed, eo.rendezvous.empty() ? eo.ranks : eo.world_size);
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
  CancelToken cancel;
  engine->generate(req, sink, progress, cancel, extras);
  printer.finish();
  writer.close();
  if (!quiet) {
    std::fprintf(stderr, "h3 generate: wrote %lld frames to %s\n", (long long)writer.frames_written(),
                 out.c_str());
  }
  return 0;
}

H3_REGISTER_COMMAND(
    "generate", "a prompt or prompt embeddings in, a YUV4MPEG2 clip out (streamed chunk by chunk)",
    "usage: h3 generate [--model DIR] (--prompt TEXT | --embeds FILE) [--width W] [--height H]\n"
    "                   [--frames F] [--steps N] [--seed S] [--ranks R] --out FILE.y4m\n"
    "                   [--save-latents FILE] [--device cpu|cuda] [--timeout S] [--quiet]\n"
    "                   [--rendezvous HOST:PORT --world-size N --token-file FILE]\n"
    "\n"
    "  --model DIR          model folder (release layout); default: the tiny default model\n"
    "                       ($H3_MODEL_DIR, else the installed or build tree's copy)\n"
    "  --prompt TEXT        prompt for a model with a built-in text encoder (the tiny model)\n"
    "  --embeds FILE        precomputed prompt embeddings: safetensors with `embeds` [L, text_dim]\n"
    "                       (bf16 or fp32) and optionally `tags` [L]; the full-size model needs this\n"
    "  --width W --height H output size in pixels (16..4096; the model computes on a canvas rounded up\n"
    "                       to multiples of 32 and crops); 0 or absent: the model default\n"
    "  --frames F           exact output frame count (1..1024; generated as 17n+5 and trimmed)\n"
    "  --steps N            grid points of the sampling schedule (>= 2; N - 1 denoiser evaluations)\n"
    "  --seed S             noise seed (default 0)\n"
    "  --ranks R            ranks as threads; the DiT runs tensor-parallel over them (default 1)\n"
    "  --out FILE.y4m       YUV4MPEG2 output (C444, BT.601 limited range, 24 fps); '-' = stdout\n"
    "  --save-latents FILE  also write the final `video` and `audio` latents (before decoding)\n"
    "  --device cpu|cuda    where the DiT and the VAE run (cuda: rank r on cuda:r, NCCL between ranks)\n"
    "  --timeout S          bound on every collective and on joining the ranks (default 120)\n"
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
