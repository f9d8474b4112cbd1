// `h3 bench dit`: seconds per DiT step at every tp x sp layout of 1..max-ranks ranks (ranks as
// threads, one intra-op thread each) on a medium random model where compute dominates, the
// bytes each layout sends per step, the achieved GEMM FLOP/s against the plain at::mm rate
// measured in the same run, and each rank's peak and resident memory (with AdaLN tables too).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/device.h"
#include "dist/group.h"
#include "dist/world.h"
#include "dit/random_model.h"
#include "dit/sampler.h"
#include "dit/transformer.h"
#include "h3/error.h"
#include "io/safetensors.h"
#include "tools/command.h"
#include "tools/cpu_time.h"
#include "tools/dit_inputs_file.h"
#include "tools/gemm_rate.h"
#include "tools/heap_reuse.h"
#include "tools/scratch_dir.h"

namespace h3::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Per-rank accounting of CPU tensor memory: a wrapper around LibTorch's CPU allocator that
// charges each allocation to the rank thread that made it (a rank's tensors may be freed by
// another thread; the charge follows the allocation).
struct RankMemory {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
};
thread_local RankMemory* t_rank_memory = nullptr;

// The allocation is handed out with its own address as the DataPtr's context (oneDNN's linear
// allocates through raw_allocate, which requires that), so the charge is kept in a side table.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) { base_deleter_ = base->raw_deleter(); }
  c10::DataPtr allocate(size_t n) override {
    void* data = base_->raw_allocate(n);
    if (RankMemory* m = t_rank_memory) {
      {
        std::lock_guard<std::mutex> lock(charges_mutex_);
        charges_[data] = Charge{static_cast<int64_t>(n), m};
      }
      const int64_t now = m->current += static_cast<int64_t>(n);
      int64_t peak = m->peak.load();
      while (now > peak && !m->peak.compare_exchange_weak(peak, now)) {
      }
    }
    return c10::DataPtr(data, data, &release, c10::Device(c10::kCPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  struct Charge {
    int64_t bytes;
    RankMemory* memory;
  };
  static void release(void* data) {
    {
      std::lock_guard<std::mutex> lock(charges_mutex_);
      if (auto it = charges_.find(data); it != charges_.end()) {
        it->second.memory->current -= it->second.bytes;
        charges_.erase(it);
      }
    }
    base_deleter_(data);
  }
  c10::Allocator* base_;
  // One allocator per process (installed once), so its deleter's state is static.
  static inline c10::DeleterFnPtr base_deleter_ = nullptr;
  static inline std::mutex charges_mutex_;
  static inline std::unordered_map<void*, Charge> charges_;
};

void install_counting_allocator() {
  static CountingAllocator counting(c10::GetCPUAllocator());
  static std::once_flag once;
  std::call_once(once, [] { c10::SetCPUAllocator(&counting, /*priority=*/1); });
}

// OpenBLAS keeps its own thread pool, which at::set_num_threads does not reach.
void set_blas_threads(int n) {
  using Fn = void (*)(int);
  if (auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(n);
}

// Multiply-add FLOPs of the GEMMs of one forward on one rank (blocks and refiner: projections,
// attention scores and values); embeddings and heads are left out (under 1 %).
double gemm_flops(const dit::DitConfig& c, int64_t rows, int64_t text_rows, int tp) {
  auto block = [&](int64_t s) {
    const double h = static_cast<double>(c.hidden_size), inner = static_cast<double>(c.inner_dim()) / tp,
                 f = static_cast<double>(c.ffn_dim) / tp, sd = static_cast<double>(s);
    return 2 * sd * h * (3 * inner + inner + 2 * f + f) + 4 * sd * sd * inner;
  };
  return static_cast<double>(c.num_layers) * block(rows) +
         static_cast<double>(c.num_refiner_layers) * block(text_rows);
}

struct Rate {
  double wall = 0, cpu = 0;  // FLOP/s by wall time and by thread CPU time
};

Rate mm_rate(int64_t m, int64_t k, int64_t n) {
  auto a = at::randn({m, k}), b = at::randn({k, n});
  double best_wall = 1e30, best_cpu = 1e30;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = Clock::now();
    const double c0 = thread_cpu_seconds();
    auto c = at::mm(a, b);
    best_cpu = std::min(best_cpu, thread_cpu_seconds() - c0);
    best_wall = std::min(best_wall, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double flops = 2.0 * static_cast<double>(m * k * n);
  return {flops / best_wall, flops / best_cpu};
}

struct TpResult {
  double seconds_per_step = 0;      // wall, slowest rank
  double cpu_seconds_per_step = 0;  // thread CPU time, busiest rank
  int64_t bytes_sent_per_step = 0;  // the busiest rank's (dist::Group::bytes_sent)
  std::vector<int64_t> peak_bytes, weight_bytes;
  // Transformer::resident_bytes: as loaded, and with the AdaLN tables of a 50-point grid instead
  // of the projections.
  std::vector<int64_t> resident_bytes, resident_with_tables;
};

// Waits for the device to finish a step (a no-op on the CPU): GPU kernels run asynchronously.
void wait_for(const dit::Velocity& v) {
  if (v.video.is_cuda()) (void)v.video.sum().item<float>();
}

// `ranks` ranks as tp x sp (opts.sp).
TpResult run_tp(const std::string& dir, const dit::DitInputs& in, int ranks, int steps,
                const dit::TransformerOptions& opts) {
  TpResult r;
  const size_t n = static_cast<size_t>(ranks);
  r.peak_bytes.assign(n, 0);
  r.weight_bytes.assign(n, 0);
  r.resident_bytes.assign(n, 0);
  r.resident_with_tables.assign(n, 0);
  std::vector<double> secs(n, 0), cpu(n, 0);
  std::vector<int64_t> sent(n, 0);
  auto body = [&](dist::Group* g) {
    at::set_num_threads(1);
    RankMemory memory;
    t_rank_memory = &memory;
    const int rank = g ? g->rank() : 0;
    {
      dit::TransformerOptions to = opts;
      if (to.device.is_cuda() && g) to.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(rank));
      auto model = dit::Transformer::load(dir, g, to);
      int64_t wb = 0;
      for (const auto& [name, t] : model.weights().named()) wb += static_cast<int64_t>(t.nbytes());
      wait_for(model.forward(in));  // warm-up
      if (g) g->barrier();
      const int64_t b0 = g ? g->bytes_sent() : 0;
      const auto t0 = Clock::now();
      const double c0 = thread_cpu_seconds();
      for (int i = 0; i < steps; ++i) wait_for(model.forward(in));
      cpu[static_cast<size_t>(rank)] = (thread_cpu_seconds() - c0) / steps;
      secs[static_cast<size_t>(rank)] = std::chrono::duration<double>(Clock::now() - t0).count() / steps;
      sent[static_cast<size_t>(rank)] = g ? (g->bytes_sent() - b0) / steps : 0;
      r.weight_bytes[static_cast<size_t>(rank)] = wb;
      r.resident_bytes[static_cast<size_t>(rank)] = model.resident_bytes();
      model.use_adaln_tables(dit::evaluation_timesteps(dit::make_schedule(50, dit::kVideoShift),
                                                       dit::make_schedule(50, dit::kAudioShift)),
                             /*drop_projections=*/true);
      r.resident_with_tables[static_cast<size_t>(rank)] = model.resident_bytes();
    }
    r.peak_bytes[static_cast<size_t>(rank)] = memory.peak.load();
    t_rank_memory = nullptr;
  };
  if (ranks == 1) {
    body(nullptr);
  } else {
    dist::WorldOptions wo;
    if (opts.device.is_cuda()) wo.backend = dist::Backend::kNccl;  // rank r on cuda:r
    auto results = dist::run_threads(
        ranks, [&](dist::Group& g) { body(&g); }, wo);
    for (const auto& res : results) {
      if (!res.ok && res.exception) std::rethrow_exception(res.exception);
    }
  }
  r.seconds_per_step = *std::max_element(secs.begin(), secs.end());
  r.cpu_seconds_per_step = *std::max_element(cpu.begin(), cpu.end());
  r.bytes_sent_per_step = *std::max_element(sent.begin(), sent.end());
  return r;
}

// The matrix products of one forward on one rank: per block (on all rows) and per refiner block
// (on the text rows) the q, k, v, output and two FFN projections and per head the scores and
// values. Embeddings, AdaLN rows and heads are left out (under 1 %).
std::vector<Gemm> forward_gemms(const dit::DitConfig& c, const dit::DitInputs& in) {
  const int64_t video = in.video.size(2) * (in.video.size(3) / c.patch[1]) * (in.video.size(4) / c.patch[2]);
  const int64_t text = in.text.size(0), rows = text + in.audio.size(0) + video;
  std::vector<Gemm> g;
  auto blocks = [&](int64_t s, int64_t count) {
    const int64_t h = c.hidden_size, inner = c.inner_dim(), f = c.ffn_dim;
    g.push_back({1, s, h, inner, 3 * count});
    g.push_back({1, s, inner, h, count});
    g.push_back({1, s, h, 2 * f, count});
    g.push_back({1, s, f, h, count});
    g.push_back({c.num_heads, s, c.head_dim, s, count});
    g.push_back({c.num_heads, s, s, c.head_dim, count});
  };
  blocks(rows, c.num_layers);
  blocks(text, c.num_refiner_layers);
  return g;
}

// The engine's side of scripts/bench-reference.sh: the transformer and inputs from files (the
// same ones diffusers loads there), `threads` intra-op threads in one rank, one warm-up forward
// (on `warmup_path` when given, else on the inputs), then `repeat` timed forwards, each printed
// as `seconds S`; the velocities go to `out_path`.
int run_files(const std::string& dir, const std::string& inputs_path, const std::string& warmup_path,
              const std::string& out_path, int threads, int64_t repeat, const dit::TransformerOptions& opts) {
  set_blas_threads(threads);
  at::set_num_threads(threads);
  const dit::DitInputs in = read_dit_inputs(inputs_path);
  const auto model = dit::Transformer::load(dir, nullptr, opts);
  (void)model.forward(warmup_path.empty() ? in : read_dit_inputs(warmup_path));
  dit::Velocity v;
  double best = 1e30;
  for (int64_t k = 0; k < repeat; ++k) {
    const auto t0 = Clock::now();
    v = model.forward(in);
    wait_for(v);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    std::printf("seconds %.4f\n", s);
    std::fflush(stdout);
  }
  if (!opts.device.is_cuda()) print_gemm_rate("dit forward", forward_gemms(model.config(), in), best);
  if (!out_path.empty()) {
    io::write_safetensors(out_path, {{"velocity_video", v.video.to(at::kCPU, at::kFloat).contiguous()},
                                     {"velocity_audio", v.audio.to(at::kCPU, at::kFloat).contiguous()}});
  }
  return 0;
}

int run(Args& args) {
  dit::DitConfig c;
  c.hidden_size = args.int_or("hidden", 512, 64, 8192);
  c.num_layers = args.int_or("layers", 4, 1, 64);
  c.num_heads = args.int_or("heads", 4, 1, 64);
  c.head_dim = 128;
  c.ffn_dim = args.int_or("ffn", 3 * c.hidden_size, 64, 65536);
  c.num_refiner_layers = 2;
  c.text_dim = 256;
  c.time_embed_hidden_dim = c.hidden_size;
  c.time_embed_dim = c.hidden_size / 2;
  const int64_t latent_frames = args.int_or("frames", 7, 2, 1000);  // 5n+2
  const int64_t lat_h = args.int_or("latent-height", 48, 2, 512),
                lat_w = args.int_or("latent-width", 52, 2, 512);
  const int steps = static_cast<int>(args.int_or("steps", 2, 1, 100));
  const int max_ranks = static_cast<int>(args.int_or("max-ranks", 2, 1, 16));
  const bool malloc_default = args.flag("malloc-default");
  dit::TransformerOptions opts;
  opts.device = parse_device(args.string_or("device", "cpu"), "--device");
  const std::string dtype = args.string_or("dtype", "fp32");
  if (dtype != "fp32" && dtype != "bf16") throw UsageError{"--dtype must be fp32 or bf16"};
  opts.dtype = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  const std::string files_dir = args.string_or("transformer", "");
  const std::string inputs_path = args.string_or("inputs", "");
  const std::string warmup_path = args.string_or("warmup", "");
  const std::string out_path = args.string_or("out", "");
  const int threads = static_cast<int>(args.int_or("threads", 1, 1, 1024));
  const int64_t repeat = args.int_or("repeat", 1, 1, 100);
  args.finish();
  if (!files_dir.empty() || !inputs_path.empty()) {
    if (files_dir.empty() || inputs_path.empty()) throw UsageError{"--transformer and --inputs go together"};
    return run_files(files_dir, inputs_path, warmup_path, out_path, threads, repeat, opts);
  }
  c.validate("bench config");

  const tools::ScratchDir scratch(std::filesystem::temp_directory_path().string(), "h3-bench-dit-");
  const std::string& dir = scratch.path();
  dit::write_random_transformer(dir, c, 1);

  dit::DitInputs in;
  const int64_t text_rows = 64, audio = 37;
  in.text = at::randn({text_rows, c.text_dim});
  in.video = at::randn({1, c.in_channels, latent_frames, lat_h, lat_w});
  in.audio = at::randn({2 * audio, c.audio_in_channels});
  in.t_video = 0.3f;
  in.t_audio = 0.6f;
  const int64_t video_rows = latent_frames * (lat_h / 2) * (lat_w / 2);
  const int64_t rows = text_rows + 2 * audio + video_rows;

  install_counting_allocator();
  // --malloc-default keeps glibc's behaviour (large blocks mmapped and returned on free).
  if (!malloc_default) keep_freed_memory_in_heap();
  set_blas_threads(1);
  at::set_num_threads(1);
  std::printf(
      "h3 bench dit: hidden %lld, %lld blocks + 2 refiner, %lld heads x 128, ffn %lld, %lld rows "
      "(%lld text, %lld audio, %lld video); %s on %s, one intra-op thread per rank\n",
      (long long)c.hidden_size, (long long)c.num_layers, (long long)c.num_heads, (long long)c.ffn_dim,
      (long long)rows, (long long)text_rows, (long long)(2 * audio), (long long)video_rows, dtype.c_str(),
      opts.device.is_cuda() ? "CUDA (rank r on cuda:r)" : "the CPU");
  std::printf("malloc: %s\n",
              malloc_default ? "glibc defaults (large blocks mmapped and returned on free)"
                             : "heap only, freed memory kept (mallopt M_MMAP_MAX 0, M_TRIM_THRESHOLD 1 GiB)");
  const Rate mm = mm_rate(rows, c.hidden_size, c.ffn_dim);
  std::printf(
      "plain at::mm, 1 thread, %lldx%lld @ %lldx%lld: %.1f GFLOP/s by wall time, %.1f GFLOP/s by thread "
      "CPU time\n",
      (long long)rows, (long long)c.hidden_size, (long long)c.hidden_size, (long long)c.ffn_dim,
      mm.wall / 1e9, mm.cpu / 1e9);
  double base_wall = 0, base_cpu = 0;
  // Every rank count up to --max-ranks, each as every tp x sp layout that splits the model: the
  // same ranks with tensor parallelism only and with Ulysses beside it.
  for (int ranks = 1; ranks <= max_ranks; ++ranks) {
    if (opts.device.is_cuda() && ranks > cuda_device_count()) break;
    for (int sp = 1; sp <= ranks; ++sp) {
      if (ranks % sp != 0) continue;
      const int tp = ranks / sp;
      try {
        dit::check_layout(c, ranks, sp);
      } catch (const Error&) {
        continue;
      }
      opts.sp = sp;
      const auto r = run_tp(dir, in, ranks, steps, opts);
      const double flops = gemm_flops(c, rows, text_rows, ranks);
      if (ranks == 1) {
        base_wall = r.seconds_per_step;
        base_cpu = r.cpu_seconds_per_step;
      }
      std::printf(
          "TP%d x SP%d: %.3f s/step wall (x%.2f vs 1 rank), %.3f CPU s/step on the busiest rank (x%.2f vs 1 "
          "rank), %.2f MiB sent per step by the busiest rank\n",
          tp, sp, r.seconds_per_step, base_wall / r.seconds_per_step, r.cpu_seconds_per_step,
          base_cpu / r.cpu_seconds_per_step, static_cast<double>(r.bytes_sent_per_step) / (1 << 20));
      std::printf(
          "  GEMM %.1f GFLOP per rank per step: %.1f GFLOP/s by wall time (%.0f %% of at::mm), %.1f GFLOP/s "
          "by "
          "CPU time (%.0f %% of at::mm)\n",
          flops / 1e9, flops / r.seconds_per_step / 1e9, 100.0 * flops / r.seconds_per_step / mm.wall,
          flops / r.cpu_seconds_per_step / 1e9, 100.0 * flops / r.cpu_seconds_per_step / mm.cpu);
      for (int k = 0; k < ranks; ++k) {
        const size_t i = static_cast<size_t>(k);
        std::printf(
            "  rank %d: weights %.1f MiB, peak tensor memory %.1f MiB; resident %.2f MiB, %.2f MiB with the "
            "AdaLN "
            "tables of a 50-point grid\n",
            k, static_cast<double>(r.weight_bytes[i]) / (1 << 20),
            static_cast<double>(r.peak_bytes[i]) / (1 << 20),
            static_cast<double>(r.resident_bytes[i]) / (1 << 20),
            static_cast<double>(r.resident_with_tables[i]) / (1 << 20));
      }
    }
  }
  return 0;
}

H3_REGISTER_COMMAND(
    "bench dit", "DiT step time and bytes sent per tp x sp layout, GEMM efficiency, memory per rank",
    "usage: h3 bench dit [--hidden 512] [--layers 4] [--heads 4] [--ffn 3*hidden]\n"
    "                    [--frames 7] [--latent-height 48] [--latent-width 52]\n"
    "                    [--steps 2] [--max-ranks 2] [--malloc-default]\n"
    "                    [--device cpu|cuda] [--dtype fp32|bf16]\n"
    "\n"
    "A random model (head_dim 128, 2 refiner blocks, 64 text rows, 74 audio rows) is written\n"
    "to a temporary folder and loaded through the engine's loader at each tp x sp layout of 1 to\n"
    "--max-ranks ranks that splits it (ranks as threads, one intra-op and one BLAS thread each).\n"
    "Prints seconds per step, the bytes the busiest rank sends per step, GEMM FLOP/s\n"
    "per rank against a plain at::mm measured in the same run, and peak tensor memory per rank\n"
    "(host memory: on CUDA only the weights' bytes mean anything). --device cuda runs rank r on\n"
    "cuda:r (NCCL between ranks, TP sizes up to the GPUs present); --dtype bf16 as released.\n"
    "\n"
    "h3 bench dit --transformer DIR --inputs FILE [--warmup FILE] [--out FILE] [--threads N]\n"
    "             [--repeat N] [--dtype fp32|bf16]\n"
    "runs the transformer folder DIR on the inputs of FILE (the format of `h3 dit-forward\n"
    "--inputs`) instead: 1 rank, N intra-op threads, one untimed forward first (on --warmup's\n"
    "inputs when given), `seconds S` per timed forward, the GEMM rate against at::mm, and the\n"
    "velocities written to --out (scripts/bench-reference.sh runs it beside diffusers).",
    run);

}  // namespace
}  // namespace h3::tools
