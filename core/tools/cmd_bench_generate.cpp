// `h3 bench generate`: the engine end to end on the tiny default model and on a medium random
// model, at 1 and 2 ranks: load time, seconds per denoising step, decode time, time to the first
// chunk, total. Figures only; nothing asserts a time.

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/device.h"
#include "common/error.h"
#include "engine/engine.h"
#include "engine/tiny_model.h"
#include "tools/command.h"
#include "tools/scratch_dir.h"

namespace h3::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Counts frames and notes when the first chunk arrived.
class TimingSink : public ChunkSink {
 public:
  explicit TimingSink(Clock::time_point t0) : t0_(t0) {}
  void on_chunk(const Chunk& c) override {
    if (frames == 0) first_chunk_s = std::chrono::duration<double>(Clock::now() - t0_).count();
    frames += c.frames.size(0);
  }
  int64_t frames = 0;
  double first_chunk_s = 0;

 private:
  Clock::time_point t0_;
};

struct Case {
  std::string name, model_dir;
  GenerationRequest req;
};

void run_case(const Case& c, int ranks, int repeats, const std::string& device) {
  EngineOptions eo;
  eo.model_dir = c.model_dir;
  eo.ranks = ranks;
  eo.device = device;
  auto engine = Engine::open(eo);
  const ClipPlan plan = engine->plan(c.req);
  for (int rep = 0; rep < repeats; ++rep) {
    const auto t0 = Clock::now();
    TimingSink sink(t0);
    double denoise_start = 0, decode_start = 0;
    auto progress = [&](const Progress& p) {
      if (p.phase == Phase::kConditioning) denoise_start = p.elapsed_s;
      if (p.phase == Phase::kDecoding && p.chunk == 0) decode_start = p.elapsed_s;
    };
    CancelToken cancel;
    engine->generate(c.req, sink, progress, cancel);
    const double total = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("%-8s %5d %6.2f %4lldx%-4lld %6lld %5lld %9.3f %8.3f %9.3f %8.3f\n", c.name.c_str(), ranks,
                engine->load_seconds(), (long long)plan.width, (long long)plan.height,
                (long long)plan.num_frames, (long long)plan.evaluations,
                (decode_start - denoise_start) / static_cast<double>(plan.evaluations), total - decode_start,
                sink.first_chunk_s, total);
    std::fflush(stdout);
  }
}

int run(Args& a) {
  const std::string tmp_base = a.string_or("dir", std::filesystem::temp_directory_path().string());
  const bool skip_medium = a.flag("tiny-only");
  const int repeats = static_cast<int>(a.int_or("repeats", 1, 1, 10));
  const std::string device = a.string_or("device", "cpu");
  a.finish();
  if (device != "cpu" && device != "cuda") throw UsageError{"--device must be cpu or cuda"};
  // On CUDA rank r runs on cuda:r: 2 ranks only where 2 GPUs are visible.
  if (device == "cuda") require_cuda_devices(1, "--device");
  std::vector<int> rank_counts{1};
  if (device == "cpu" || cuda_device_count() >= 2) rank_counts.push_back(2);

  const tools::ScratchDir scratch(tmp_base, "h3-bench-generate-");
  const std::string& tmp = scratch.path();
  std::vector<Case> cases;
  GenerationRequest tiny;
  tiny.prompt = "a benchmark";
  tiny.seed = 1;  // the model's default request: size, frames and steps
  cases.push_back({"tiny", default_model_dir(), tiny});
  if (!skip_medium) {
    TinySpec m = tiny_spec();
    m.dit.hidden_size = 384;
    m.dit.num_layers = 6;
    m.dit.num_heads = 4;
    m.dit.head_dim = 128;
    m.dit.ffn_dim = 1024;
    m.dit.text_dim = 256;
    m.dit.time_embed_hidden_dim = 384;
    m.dit.time_embed_dim = 192;
    m.vae.num_layers = 4;
    m.vae.num_heads = 4;
    m.vae.head_dim = 64;
    write_random_model(tmp + "/medium", m, 11);
    GenerationRequest med;
    med.prompt = "a benchmark";
    med.width = 320;
    med.height = 192;
    med.num_frames = 56;
    med.steps = 5;
    med.seed = 1;
    cases.push_back({"medium", tmp + "/medium", med});
  }
  if (device == "cpu") {
    std::printf("h3 bench generate (CPU, fp32; OMP threads as set by the environment)\n");
  } else {
    std::printf("h3 bench generate (CUDA: DiT in bf16 as released, VAE in fp32; rank r on cuda:r)\n");
  }
  std::printf("%-8s %5s %6s %9s %6s %5s %9s %8s %9s %8s\n", "model", "ranks", "load_s", "size", "frames",
              "evals", "s/step", "decode_s", "1st_chunk", "total_s");
  for (const auto& c : cases) {
    for (int ranks : rank_counts) run_case(c, ranks, repeats, device);
  }
  std::printf(
      "\nmedium = DiT hidden 384, 6 blocks + 2 refiners, 4 heads x 128, ffn 1024, text 256; VAE decoder 4\n"
      "layers, 4 heads x 64. s/step: denoising time / evaluations (conditioning included);\n"
      "decode_s: from the end of denoising to the last chunk; 1st_chunk: from generate() to the\n"
      "first chunk at the sink.\n");
  return 0;
}

H3_REGISTER_COMMAND(
    "bench generate", "the engine end to end: load, s/step, decode, first chunk, total",
    "usage: h3 bench generate [--tiny-only] [--repeats N] [--dir DIR] [--device cpu|cuda]\n"
    "\n"
    "Runs the tiny default model at its default request and a medium random model (written\n"
    "to a temp folder under DIR, default $TMPDIR or /tmp, deleted after) at 320x192, 56\n"
    "frames, 5 grid points, each at 1 and 2 ranks, and prints load time, seconds per\n"
    "denoising step, decode time, time to the first chunk and the total.\n"
    "\n"
    "  --tiny-only   skip the medium model\n"
    "  --repeats N   generations per engine (default 1; later ones show the warm figures)\n"
    "  --device D    cpu (default) or cuda (rank r on cuda:r; 2 ranks where 2 GPUs are visible)",
    run);

}  // namespace
}  // namespace h3::tools
