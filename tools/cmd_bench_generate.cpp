// `h3 bench generate`: the engine end to end on the tiny default model and on a medium random
// model, at 1 and 2 ranks: load time, seconds per denoising step, decode time, time to the first
// chunk, total. With --compare-dtypes: the same seeded request in fp32 and in bf16
// (EngineOptions::compute_dtype), their times, the DiT's weight memory in each and how far bf16's
// latents and frames are from fp32's. Figures only; nothing asserts a time.

#include <ATen/ATen.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/device.h"
#include "dit/transformer.h"
#include "engine/engine.h"
#include "engine/model/compute_dtype.h"
#include "h3/error.h"
#include "tools/command.h"
#include "tools/scratch_dir.h"
#include "tools/tiny_model.h"

namespace h3::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Counts frames and notes when the first chunk arrived; keeps the frames when asked to.
class TimingSink : public ChunkSink {
 public:
  TimingSink(Clock::time_point t0, bool keep) : t0_(t0), keep_(keep) {}
  void on_chunk(const Chunk& c) override {
    if (!c.frames.defined()) return;  // a chunk's soundtrack stretch, after its frames
    if (frames == 0) first_chunk_s = std::chrono::duration<double>(Clock::now() - t0_).count();
    frames += c.frames.size(0);
    if (keep_) kept.push_back(c.frames);
  }
  int64_t frames = 0;
  double first_chunk_s = 0;
  std::vector<at::Tensor> kept;

 private:
  Clock::time_point t0_;
  bool keep_;
};

struct Case {
  std::string name, model_dir;
  GenerationRequest req;
};

// CPU seconds of every thread of this process: unlike wall time, not inflated when other
// processes compete for the cores (the --compare-dtypes figures report both).
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One generation's figures; the final latents and the frames when kept.
struct Timed {
  double s_per_step = 0, decode_s = 0, first_chunk_s = 0, total_s = 0;
  double cpu_s_per_step = 0, cpu_total_s = 0;  // process CPU seconds
  at::Tensor latents, frames;
};

Timed generate_timed(Engine& engine, const GenerationRequest& req, bool keep) {
  const ClipPlan plan = engine.plan(req);
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_seconds();
  TimingSink sink(t0, keep);
  double denoise_start = 0, decode_start = 0, cpu_denoise_start = 0, cpu_decode_start = 0;
  auto progress = [&](const Progress& p) {
    if (p.phase == Phase::kConditioning) {
      denoise_start = p.elapsed_s;
      cpu_denoise_start = process_cpu_seconds();
    }
    if (p.phase == Phase::kDecoding && p.chunk == 0) {
      decode_start = p.elapsed_s;
      cpu_decode_start = process_cpu_seconds();
    }
  };
  Timed t;
  GenerateExtras extras;
  if (keep)
    extras.on_latents = [&](const at::Tensor& video, const at::Tensor&) { t.latents = video.clone(); };
  StreamControl cancel;
  engine.generate(req, sink, progress, cancel, extras);
  t.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  t.cpu_total_s = process_cpu_seconds() - cpu0;
  t.s_per_step = (decode_start - denoise_start) / static_cast<double>(plan.evaluations);
  t.cpu_s_per_step = (cpu_decode_start - cpu_denoise_start) / static_cast<double>(plan.evaluations);
  t.decode_s = t.total_s - decode_start;
  t.first_chunk_s = sink.first_chunk_s;
  if (keep) t.frames = at::cat(sink.kept, 0);
  return t;
}

void run_case(const Case& c, int ranks, int repeats, const std::string& device) {
  EngineOptions eo;
  eo.model_dir = c.model_dir;
  eo.ranks = ranks;
  eo.device = device;
  auto engine = Engine::open(eo);
  const ClipPlan plan = engine->plan(c.req);
  for (int rep = 0; rep < repeats; ++rep) {
    const Timed t = generate_timed(*engine, c.req, false);
    std::printf("%-8s %5d %6.2f %4lldx%-4lld %6lld %5lld %9.3f %8.3f %9.3f %8.3f\n", c.name.c_str(), ranks,
                engine->load_seconds(), (long long)plan.width, (long long)plan.height,
                (long long)plan.num_frames, (long long)plan.evaluations, t.s_per_step, t.decode_s,
                t.first_chunk_s, t.total_s);
    std::fflush(stdout);
  }
}

// The DiT's weights at one rank in a compute dtype, in MiB (what the engine's DiT holds).
double dit_weight_mib(const std::string& model_dir, const std::string& dtype, const std::string& device) {
  dit::TransformerOptions to;
  to.device = device == "cuda" ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  to.dtype = engine_detail::compute_scalar_type(dtype);
  const dit::Transformer t = dit::Transformer::load(model_dir + "/transformer", nullptr, to);
  int64_t bytes = 0;
  for (const auto& [name, w] : t.weights().named()) bytes += static_cast<int64_t>(w.nbytes());
  return static_cast<double>(bytes) / (1 << 20);
}

// The same seeded request in fp32 and in bf16 at one rank: the last of `repeats` generations
// of each is timed (the first pays for warm-up when repeats > 1) and compared.
void compare_dtypes(const Case& c, int repeats, const std::string& device) {
  Timed runs[2];
  double load_s[2] = {0, 0};
  const char* dtypes[2] = {"fp32", "bf16"};
  for (int i = 0; i < 2; ++i) {
    EngineOptions eo;
    eo.model_dir = c.model_dir;
    eo.device = device;
    eo.compute_dtype = dtypes[i];
    auto engine = Engine::open(eo);
    load_s[i] = engine->load_seconds();
    for (int rep = 0; rep < repeats; ++rep) runs[i] = generate_timed(*engine, c.req, rep == repeats - 1);
  }
  const at::Tensor frame_diff = (runs[0].frames.to(at::kInt) - runs[1].frames.to(at::kInt)).abs();
  for (int i = 0; i < 2; ++i) {
    const Timed& r = runs[i];
    std::printf("%-8s %-5s %6.2f %9.3f %10.3f %8.3f %8.3f %11.3f %9.2f\n", c.name.c_str(), dtypes[i],
                load_s[i], r.s_per_step, r.cpu_s_per_step, r.decode_s, r.total_s, r.cpu_total_s,
                dit_weight_mib(c.model_dir, dtypes[i], device));
  }
  std::printf(
      "%-8s bf16 speed-up (fp32 time / bf16 time): s/step %.2fx wall, %.2fx CPU; total %.2fx wall, "
      "%.2fx CPU\n",
      c.name.c_str(), runs[0].s_per_step / runs[1].s_per_step,
      runs[0].cpu_s_per_step / runs[1].cpu_s_per_step, runs[0].total_s / runs[1].total_s,
      runs[0].cpu_total_s / runs[1].cpu_total_s);
  std::printf(
      "%-8s bf16 vs fp32: latents max |diff| %.4g (fp32 latents max |x| %.3g); frames %lld x %lldx%lld, "
      "uint8 max |diff| %d, mean |diff| %.3f, %.2f%% of values differ\n",
      c.name.c_str(), (runs[0].latents - runs[1].latents).abs().max().item<double>(),
      runs[0].latents.abs().max().item<double>(), (long long)runs[0].frames.size(0),
      (long long)runs[0].frames.size(2), (long long)runs[0].frames.size(1), frame_diff.max().item<int>(),
      frame_diff.to(at::kDouble).mean().item<double>(),
      100.0 * frame_diff.ne(0).to(at::kDouble).mean().item<double>());
  std::fflush(stdout);
}

int run(Args& a) {
  const std::string tmp_base = a.string_or("dir", std::filesystem::temp_directory_path().string());
  const bool skip_medium = a.flag("tiny-only");
  const int repeats = static_cast<int>(a.int_or("repeats", 1, 1, 10));
  const std::string device = a.string_or("device", "cpu");
  const bool dtypes = a.flag("compare-dtypes");
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
    write_random_model(tmp + "/medium", medium_spec(), 11);
    GenerationRequest med;
    med.prompt = "a benchmark";
    med.width = 320;
    med.height = 192;
    med.num_frames = 56;
    med.steps = 5;
    med.seed = 1;
    cases.push_back({"medium", tmp + "/medium", med});
  }
  if (dtypes) {
    std::printf(
        "h3 bench generate --compare-dtypes (%s, 1 rank; the DiT and the text encoder in each "
        "compute dtype, the VAE in fp32; the CPU %s native bf16 (AMX-BF16 or AVX-512-BF16))\n",
        device.c_str(), engine_detail::cpu_has_native_bf16() ? "has" : "lacks");
    std::printf("%-8s %-5s %6s %9s %10s %8s %8s %11s %9s\n", "model", "dtype", "load_s", "s/step",
                "cpu_s/step", "decode_s", "total_s", "cpu_total_s", "dit_MiB");
    for (const auto& c : cases) compare_dtypes(c, repeats, device);
    std::printf(
        "\ndit_MiB: the DiT's weights at one rank (blocks in the compute dtype; norms, modulation,\n"
        "time MLP, patch projections and heads in fp32). cpu_*: CPU seconds of all of this process's\n"
        "threads (not inflated when other processes share the cores, as wall time is). speed-up:\n"
        "fp32 time / bf16 time (below 1: bf16 is slower). Frames are compared over every pixel of\n"
        "every frame.\n");
    return 0;
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
    "usage: h3 bench generate [--tiny-only] [--repeats N] [--dir DIR] [--device cpu|cuda] "
    "[--compare-dtypes]\n"
    "\n"
    "Runs the tiny default model at its default request and a medium random model (written\n"
    "to a temp folder under DIR, default $TMPDIR or /tmp, deleted after) at 320x192, 56\n"
    "frames, 5 grid points, each at 1 and 2 ranks, and prints load time, seconds per\n"
    "denoising step, decode time, time to the first chunk and the total.\n"
    "\n"
    "  --tiny-only   skip the medium model\n"
    "  --repeats N   generations per engine (default 1; later ones show the warm figures)\n"
    "  --device D    cpu (default) or cuda (rank r on cuda:r; 2 ranks where 2 GPUs are visible)\n"
    "  --compare-dtypes  instead: each model's request at 1 rank in fp32 and in bf16 (compute-dtype):\n"
    "                s/step, decode, total, the DiT's weight MiB, the speed-up, and bf16's distance\n"
    "                from fp32 (latents' max |diff|, frames' uint8 max and mean |diff|)",
    run);

}  // namespace
}  // namespace h3::tools
