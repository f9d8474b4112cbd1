// `h3 bench generate`: the engine end to end on the tiny default model and on a medium random
// model, at 1 and 2 ranks: load time, seconds per denoising step, decode time, time to the first
// chunk, total. With --compare-dtypes: the same seeded request in fp32 and in bf16
// (EngineOptions::compute_dtype), their times, the DiT's weight memory in each and how far bf16's
// latents and frames are from fp32's. Figures only; nothing asserts a time.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/cpu_kernels.h"
#include "common/device.h"
#include "common/op_profile.h"
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

// One request's time by phase (--profile): the engine opened and the request run once, cold, as
// the end-to-end race runs it (scripts/bench-reference.sh e2e: the medium model, 124 frames, 21 grid
// points). Wall and process CPU seconds of load, conditioning (the text encoder's forward within
// it), each denoising step split into attention, linears and the rest (common/op_profile.h),
// and the decode split into the video decoder and the audio decoder.
struct PhaseMark {
  double wall = 0, cpu = 0;
  OpTotals ops;
};

PhaseMark mark(Clock::time_point t0) {
  return {std::chrono::duration<double>(Clock::now() - t0).count(), process_cpu_seconds(),
          op_profile_totals()};
}

void print_phase(const char* name, const PhaseMark& a, const PhaseMark& b) {
  std::printf("%-16s %8.3f %8.3f", name, b.wall - a.wall, b.cpu - a.cpu);
}

void print_split(const PhaseMark& a, const PhaseMark& b) {
  const double wall = b.wall - a.wall, att = b.ops[OpKind::kAttention] - a.ops[OpKind::kAttention],
               lin = b.ops[OpKind::kLinear] - a.ops[OpKind::kLinear];
  std::printf("  attention %7.3f (%4.1f %%)  linears %7.3f (%4.1f %%)  other %7.3f (%4.1f %%)\n", att,
              100 * att / wall, lin, 100 * lin / wall, wall - att - lin, 100 * (wall - att - lin) / wall);
}

int profile(const std::string& model_dir, const GenerationRequest& req, const std::string& dtype) {
  const CpuFeatures& f = cpu_features();
  std::printf("h3 bench generate --profile: CPU %s [%s], %d intra-op threads, 1 rank, %s\n", f.model.c_str(),
              describe_features(f).c_str(), at::get_num_threads(), dtype.c_str());
  std::printf("kernels: %s\n", describe_cpu_kernels().c_str());
  op_profile_reset();
  op_profile_enable(true);
  const auto t0 = Clock::now();
  const PhaseMark start = mark(t0);
  EngineOptions eo;
  eo.model_dir = model_dir;
  eo.compute_dtype = dtype;
  auto engine = Engine::open(eo);
  const ClipPlan plan = engine->plan(req);
  const PhaseMark loaded = mark(t0);
  PhaseMark conditioning{}, decode_start{}, first_chunk{};
  std::vector<PhaseMark> steps;
  bool decoding = false;
  auto progress = [&](const Progress& p) {
    if (p.phase == Phase::kConditioning) conditioning = mark(t0);
    if (p.phase == Phase::kDenoising) steps.push_back(mark(t0));
    if (p.phase == Phase::kDecoding && !decoding) {
      decoding = true;
      decode_start = mark(t0);
    }
  };
  class FirstChunk : public ChunkSink {
   public:
    FirstChunk(Clock::time_point t0, PhaseMark& first) : t0_(t0), first_(first) {}
    void on_chunk(const Chunk& c) override {
      if (c.frames.defined() && frames++ == 0) first_ = mark(t0_);
    }
    int64_t frames = 0;

   private:
    Clock::time_point t0_;
    PhaseMark& first_;
  } sink(t0, first_chunk);
  StreamControl cancel;
  engine->generate(req, sink, progress, cancel);
  const PhaseMark done = mark(t0);
  op_profile_enable(false);
  if (steps.empty() || !decoding)
    throw Error(ErrorKind::kInternal, "bench generate --profile: no step or decode reported");
  std::printf("%lldx%lld, %lld frames, %lld evaluations, prompt \"%s\", seed %lld\n", (long long)plan.width,
              (long long)plan.height, (long long)plan.num_frames, (long long)plan.evaluations,
              req.prompt.c_str(), (long long)req.seed);
  std::printf("%-16s %8s %8s\n", "phase", "wall_s", "cpu_s");
  print_phase("load", start, loaded);
  std::printf("\n");
  // Conditioning: from its report to the first step's end is conditioning + step 1; the text
  // encoder's forward is timed on its own, the rest of the conditioning is not separable from step 1.
  const double text = steps.front().ops[OpKind::kTextEncode] - conditioning.ops[OpKind::kTextEncode];
  print_phase("before steps", loaded, conditioning);
  std::printf("  (plan, session, AdaLN tables)\n");
  std::printf("%-16s %8.3f %8s  (the text encoder's forward; step 1's row below starts after it)\n",
              "text encode", text, "-");
  PhaseMark prev = conditioning;
  PhaseMark step1_start = conditioning;
  step1_start.wall += text;  // step 1 starts when the text encoder is done
  for (size_t i = 0; i < steps.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "step %zu", i + 1);
    PhaseMark from = i == 0 ? step1_start : prev;
    print_phase(name, from, steps[i]);
    print_split(from, steps[i]);
    prev = steps[i];
  }
  print_phase("denoise, all", step1_start, steps.back());
  print_split(step1_start, steps.back());
  print_phase("after steps", steps.back(), decode_start);
  std::printf("  (the final latents handed to the decode)\n");
  const double audio = done.ops[OpKind::kAudioDecode] - decode_start.ops[OpKind::kAudioDecode];
  print_phase("decode", decode_start, done);
  std::printf("  video %7.3f  audio %7.3f; first chunk at %.3f s\n", done.wall - decode_start.wall - audio,
              audio, first_chunk.wall);
  print_phase("total", start, done);
  std::printf(
      "\n(cpu_s: this process's CPU seconds, every thread. The text encoder's CPU time is inside\n"
      "step 1's, the audio decoder's inside the decode's. Encoding and muxing are the pipeline's:\n"
      "scripts/bench-reference.sh e2e prints when the first raw and encoded frames leave.)\n");
  return 0;
}

int run(Args& a) {
  const std::string tmp_base = a.string_or("dir", std::filesystem::temp_directory_path().string());
  const bool skip_medium = a.flag("tiny-only");
  const int repeats = static_cast<int>(a.int_or("repeats", 1, 1, 10));
  const std::string device = a.string_or("device", "cpu");
  const bool dtypes = a.flag("compare-dtypes");
  const std::string profile_dir = a.string_or("profile", "");
  GenerationRequest race;
  race.prompt = a.string_or("prompt", "a red circle moving right on a black background");
  race.width = a.int_or("width", 320, 16, 4096);
  race.height = a.int_or("height", 192, 16, 4096);
  race.num_frames = a.int_or("frames", 124, 1, 1024);
  race.steps = a.int_or("steps", 21, 2, 1000);
  race.seed = static_cast<uint64_t>(a.int_or("seed", 7, 0, INT64_MAX));
  race.audio = true;  // as h3src's audio pad asks in the race
  const std::string dtype = a.string_or("dtype", "fp32");
  a.finish();
  if (!profile_dir.empty()) return profile(profile_dir, race, dtype);
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
    "       h3 bench generate --profile MODEL_DIR [--prompt TEXT] [--width 320] [--height 192]\n"
    "                         [--frames 124] [--steps 21] [--seed 7] [--dtype fp32|bf16]\n"
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
    "                from fp32 (latents' max |diff|, frames' uint8 max and mean |diff|)\n"
    "  --profile DIR instead: one cold request on the model in DIR (default: the end-to-end race's,\n"
    "                scripts/bench-reference.sh e2e) at 1 rank and OMP_NUM_THREADS threads, its wall\n"
    "                and CPU seconds by phase: load, text encode, each denoising step split into\n"
    "                attention, linears and the rest, decode split into video and audio",
    run);

}  // namespace
}  // namespace h3::tools
