// `h3 bench vae`: the streaming video decode against the whole-clip decode, the
// time to the first chunk, peak memory through the sink path for a 1x and a 4x
// longer clip (fresh child processes), and the 2-rank speedup. Prints figures;
// asserts nothing about speed.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/device.h"
#include "dist/group.h"
#include "dist/world.h"
#include "h3/error.h"
#include "io/safetensors.h"
#include "tools/command.h"
#include "tools/cpu_time.h"
#include "tools/gemm_rate.h"
#include "vae/cpu_threads.h"
#include "vae/random_weights.h"
#include "vae/video_decoder.h"

namespace h3::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct Spec {
  int64_t layers = 4;
  int64_t width = 256;  // heads of 64, as in the release
  int64_t t = 30;       // 5n latents: 6 clips, 6 chunks of 17 frames
  int64_t h = 12;       // 192 px: 2 x 2 tiles of 128 px per clip
  int64_t w = 12;
  // Tiles of 128 px (overlap >= 32) keep the default run within a few minutes on 2 cores;
  // --tile 256 --overlap 64 runs the release tiles (about 6x the decoder work per tile).
  int64_t tile = 128;
  int64_t overlap = 32;
};

vae::VideoDecoder make_decoder(const Spec& s) {
  vae::VaeConfig c = vae::small_config(s.layers, s.width / 64, 64);
  c.tile_size = s.tile;
  c.tile_overlap_min = s.overlap;
  c.validate("bench decoder");
  auto tensors = vae::random_decoder_tensors(c, 2026);
  return vae::VideoDecoder(c,
                           vae::bind_decoder_weights(c, [&](const std::string& n) { return tensors.at(n); }));
}

at::Tensor make_latents(const Spec& s, int64_t t) {
  at::Generator gen = at::detail::createCPUGenerator(11);
  return at::randn({1, 24, t, s.h, s.w}, gen, at::TensorOptions().dtype(at::kFloat));
}

// Peak and current resident set of this process, from /proc/self/status (kB).
int64_t status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::string(key).size()));
  }
  return -1;
}

struct Discard : ChunkSink {
  void on_chunk(const Chunk&) override {}
};

// Rank 0's timing sink: the time of the first chunk, counted from `start`.
struct Timing : ChunkSink {
  Clock::time_point start;
  double first = -1;
  int64_t chunks = 0;
  void on_chunk(const Chunk&) override {
    if (chunks++ == 0) first = std::chrono::duration<double>(Clock::now() - start).count();
  }
};

struct Run {
  double seconds = 0;
  double busiest_cpu = 0;  // CPU seconds of the rank that worked most
  double first_chunk = -1;
  int64_t chunks = 0;
};

// One decode on `ranks` rank threads, one intra-op thread each; timed on rank 0 from a
// barrier, so thread start and rendezvous are not counted.
Run timed(const vae::VideoDecoder& d, const at::Tensor& lat, int ranks, bool chunked) {
  Run run;
  Timing timing;
  std::vector<double> cpu(static_cast<size_t>(ranks), 0.0);
  const auto results = dist::run_threads(ranks, [&](dist::Group& g) {
    vae::set_cpu_threads(1);
    g.barrier();
    const double c0 = thread_cpu_seconds();
    const auto t0 = Clock::now();
    if (chunked) {
      timing.start = t0;
      d.decode_chunks(lat, g.rank() == 0 ? &timing : nullptr, g);
    } else {
      const vae::DecodedVideo v = d.decode(lat, g);
      if (g.rank() == 0) run.chunks = static_cast<int64_t>(v.chunk_frames.size());
    }
    if (g.rank() == 0) run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    cpu[static_cast<size_t>(g.rank())] = thread_cpu_seconds() - c0;
  });
  run.busiest_cpu = *std::max_element(cpu.begin(), cpu.end());
  for (const auto& r : results) {
    if (!r.ok)
      throw Error(ErrorKind::kInternal, "bench vae: rank " + std::to_string(r.rank) + ": " + r.error);
  }
  if (chunked) {
    run.first_chunk = timing.first;
    run.chunks = timing.chunks;
  }
  return run;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw Error(ErrorKind::kInternal, "bench vae: cannot find the h3 executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

struct Rss {
  int64_t peak_kb = -1, base_kb = -1, frame_bytes = 0;
};

// A fresh process decodes a clip `mult` times the bench's length through a discarding
// sink and reports its peak resident set: memory that grows with the clip shows here.
Rss rss_in_child(const Spec& s, int64_t mult) {
  std::ostringstream cmd;
  cmd << "'" << self_exe() << "' bench vae --rss-child " << mult << " --layers " << s.layers << " --width "
      << s.width << " --latent-t " << s.t << " --latent-h " << s.h << " --latent-w " << s.w << " --tile "
      << s.tile << " --overlap " << s.overlap;
  FILE* p = popen(cmd.str().c_str(), "r");
  if (!p) throw Error(ErrorKind::kInternal, "bench vae: cannot start " + cmd.str());
  Rss r;
  long long a = 0, b = 0, c = 0;
  char line[512];
  while (std::fgets(line, sizeof(line), p)) {
    if (std::sscanf(line, "rss-child %lld %lld %lld", &a, &b, &c) == 3) {
      r.peak_kb = a;
      r.base_kb = b;
      r.frame_bytes = c;
    }
  }
  if (pclose(p) != 0 || r.peak_kb < 0)
    throw Error(ErrorKind::kInternal, "bench vae: child failed: " + cmd.str());
  return r;
}

int rss_child(const Spec& s, int64_t mult) {
  vae::set_cpu_threads(1);
  const vae::VideoDecoder d = make_decoder(s);
  const int64_t t = s.t * mult;  // 5n latents: mult times the chunks of the base clip
  const at::Tensor lat = make_latents(s, t);
  Discard sink;
  // Warm-up with the 1x clip in every child: the allocator's one-time growth (glibc raises
  // its mmap threshold as large blocks are freed) then lands in both peaks alike, and the
  // difference between the children is what the clip length adds.
  d.decode_chunks(make_latents(s, s.t), sink);
  const int64_t base = status_kb("VmRSS:");
  d.decode_chunks(lat, sink);
  const int64_t frames = d.plan(t).output_frames;
  std::printf("rss-child %lld %lld %lld\n", static_cast<long long>(status_kb("VmHWM:")),
              static_cast<long long>(base), static_cast<long long>(frames * s.h * 16 * s.w * 16 * 3));
  return 0;
}

// The matrix products of one decode: per tile of n latent tokens (S = n + registers + 1), per
// layer the qkv, output and two FFN projections and per head the scores and values; then the
// output head on the n pixel tokens. The 24-channel input projections are left out (K = 24).
std::vector<Gemm> decode_gemms(const vae::VideoDecoder& d, const at::Tensor& latents) {
  const vae::VaeConfig& c = d.config();
  const auto grid = vae::plan_tiles(latents.size(3), latents.size(4), c.patch_size, c.tiling, c.tile_size,
                                    c.tile_overlap_min);
  const vae::ChunkPlan plan = d.plan(latents.size(2));
  const int64_t clips = plan.num_clips, t = plan.tokens_chunk_size + plan.token_overlap;
  std::vector<Gemm> g;
  for (int64_t i = 0; i < grid.count(); ++i) {
    const int64_t th = grid.y.lengths[static_cast<size_t>(i / grid.cols())] / grid.unit;
    const int64_t tw = grid.x.lengths[static_cast<size_t>(i % grid.cols())] / grid.unit;
    const int64_t n = t * th * tw, s = n + c.num_register_tokens + 1, dim = c.dim(), f = c.ffn_inner();
    const int64_t per = clips * c.num_layers;
    g.push_back({1, s, dim, 3 * dim, per});
    g.push_back({1, s, dim, dim, per});
    g.push_back({1, s, dim, 2 * f, per});
    g.push_back({1, s, f, dim, per});
    g.push_back({c.num_heads, s, c.head_dim, s, per});
    g.push_back({c.num_heads, s, s, c.head_dim, per});
    g.push_back({1, n, dim, c.out_channels * c.patch_size_t * c.patch_size * c.patch_size, clips});
  }
  return g;
}

// The engine's side of scripts/bench-reference.sh: the decoder and latents from files (the same
// ones diffusers loads there), `threads` intra-op threads in one rank, one warm-up decode of the
// file's `warmup` latents, then `repeat` timed whole-clip decodes, each printed as `seconds S`.
int run_files(const std::string& vae_dir, const std::string& latents_path, const std::string& out_path,
              int threads, int64_t repeat) {
  vae::set_cpu_threads(threads);
  const auto file = io::SafetensorsFile::open(latents_path);
  const at::Tensor latents = file->view("latents").clone();
  const vae::VideoDecoder d = vae::VideoDecoder::load(vae_dir);
  vae::DecodeOptions opts;
  opts.float_frames = true;
  if (file->find("warmup")) (void)d.decode(file->view("warmup").clone(), opts);
  vae::DecodedVideo v;
  double best = 1e30;
  for (int64_t k = 0; k < repeat; ++k) {
    const auto t0 = Clock::now();
    v = d.decode(latents, opts);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    std::printf("seconds %.4f\n", s);
    std::fflush(stdout);
  }
  print_gemm_rate("vae decode", decode_gemms(d, latents), best);
  if (!out_path.empty())
    io::write_safetensors(out_path, {{"frames_f32", v.frames_f32}, {"frames", v.frames}});
  return 0;
}

int run_bench(Args& a) {
  Spec s;
  s.layers = a.int_or("layers", s.layers, 1, 64);
  s.width = a.int_or("width", s.width, 64, 4096);
  s.t = a.int_or("latent-t", s.t, 3, 4096);
  s.h = a.int_or("latent-h", s.h, 1, 512);
  s.w = a.int_or("latent-w", s.w, 1, 512);
  s.tile = a.int_or("tile", s.tile, 16, 4096);
  s.overlap = a.int_or("overlap", s.overlap, 0, 4096);
  const int64_t child = a.int_or("rss-child", 0, 0, 64);
  const int max_ranks = static_cast<int>(a.int_or("ranks", 2, 1, 16));
  const bool no_rss = a.flag("no-rss");
  const int64_t repeat = a.int_or("repeat", 2, 1, 100);
  const c10::Device device = parse_device(a.string_or("device", "cpu"), "--device");
  const std::string vae_dir = a.string_or("vae", "");
  const std::string latents_path = a.string_or("latents", "");
  const std::string out_path = a.string_or("out", "");
  const int threads = static_cast<int>(a.int_or("threads", 1, 1, 1024));
  a.finish();
  if (!vae_dir.empty() || !latents_path.empty()) {
    if (vae_dir.empty() || latents_path.empty()) throw UsageError{"--vae and --latents go together"};
    return run_files(vae_dir, latents_path, out_path, threads, repeat);
  }
  if (s.width % 64 != 0) throw UsageError{"--width must be a multiple of 64 (heads of 64)"};
  if (child > 0) return rss_child(s, child);

  // On a GPU: one rank, no resident-memory probe (it measures host memory).
  const vae::VideoDecoder d = device.is_cuda() ? make_decoder(s).to(device) : make_decoder(s);
  const int ranks_to = device.is_cuda() ? 1 : max_ranks;
  const at::Tensor lat = make_latents(s, s.t);
  const vae::ChunkPlan plan = d.plan(s.t);
  const auto grid = vae::plan_tiles(s.h, s.w, 16, true, d.config().tile_size, d.config().tile_overlap_min);
  std::printf(
      "h3 bench vae: decoder %lld layers x width %lld (%lld heads x 64), random weights, fp32 on %s, tiles "
      "%lld px (overlap >= %lld)\n",
      static_cast<long long>(s.layers), static_cast<long long>(s.width), static_cast<long long>(s.width / 64),
      device.str().c_str(), static_cast<long long>(s.tile), static_cast<long long>(s.overlap));
  std::printf(
      "  latent [1, 24, %lld, %lld, %lld] -> %lld frames of %lldx%lld; %lld clips, %lld chunks, %lld tiles "
      "per clip\n",
      static_cast<long long>(s.t), static_cast<long long>(s.h), static_cast<long long>(s.w),
      static_cast<long long>(plan.output_frames), static_cast<long long>(s.w * 16),
      static_cast<long long>(s.h * 16), static_cast<long long>(plan.num_clips),
      static_cast<long long>(plan.chunks.size()), static_cast<long long>(grid.count()));
  std::fflush(stdout);

  {  // warm-up: one tile, so that first-touch costs do not land in the first timing
    vae::set_cpu_threads(1);
    const auto clip = lat.narrow(2, 0, std::min<int64_t>(7, s.t));
    (void)vae::decode_tile(d.config(), d.weights(), vae::tile_latent(clip, grid, 0));
  }
  double whole1 = 0, cpu1 = 0;
  for (int ranks = 1; ranks <= ranks_to; ranks *= 2) {
    // Alternating runs, the fastest of each kind: the machine is shared, and the minimum is
    // the figure least disturbed by other work.
    Run whole, chunked;
    for (int64_t k = 0; k < repeat; ++k) {
      const Run w = timed(d, lat, ranks, false);
      const Run c = timed(d, lat, ranks, true);
      if (k == 0 || w.seconds < whole.seconds) whole = w;
      if (k == 0 || c.seconds < chunked.seconds) chunked = c;
    }
    if (ranks == 1) {
      whole1 = whole.seconds;
      cpu1 = whole.busiest_cpu;
    }
    const double per_chunk = whole.seconds / static_cast<double>(chunked.chunks);
    std::printf(
        "  %d rank(s): whole %.2f s | chunked %.2f s (%.3f x whole) | first chunk %.2f s = %.3f x "
        "whole/chunks (%.2f s)",
        ranks, whole.seconds, chunked.seconds, chunked.seconds / whole.seconds, chunked.first_chunk,
        chunked.first_chunk / per_chunk, per_chunk);
    if (ranks > 1) std::printf(" | speedup %.2f x", whole1 / whole.seconds);
    // The busiest rank's CPU time: what the wall time would be without waiting and without
    // other load on the machine (vCPUs whose host is busy run slower, not less).
    std::printf("\n     whole: busiest rank %.2f CPU s (wall / CPU %.2f)", whole.busiest_cpu,
                whole.seconds / whole.busiest_cpu);
    if (ranks > 1) std::printf(" | speedup by CPU time %.2f x", cpu1 / whole.busiest_cpu);
    std::printf("\n");
    std::fflush(stdout);
  }
  if (!no_rss && !device.is_cuda()) {
    const Rss one = rss_in_child(s, 1);
    const Rss four = rss_in_child(s, 4);
    const double growth_mb = static_cast<double>(four.peak_kb - one.peak_kb) / 1024.0;
    const double frames_mb = static_cast<double>(four.frame_bytes) / (1024.0 * 1024.0);
    std::printf(
        "  peak RSS through the sink (1 rank, fresh process, after a 1x warm-up decode): 1x clip %.1f MiB, "
        "4x clip %.1f MiB; growth %.1f MiB = %.1f %% of the 4x clip's %.1f MiB of uint8 frames\n",
        static_cast<double>(one.peak_kb) / 1024.0, static_cast<double>(four.peak_kb) / 1024.0, growth_mb,
        100.0 * growth_mb / frames_mb, frames_mb);
  }
  return 0;
}

H3_REGISTER_COMMAND(
    "bench vae", "streaming video-VAE decode: chunked vs whole, first chunk, memory, ranks",
    "usage: h3 bench vae [--layers N] [--width W] [--latent-t T] [--latent-h H] [--latent-w W]\n"
    "                    [--tile PX] [--overlap PX] [--ranks N] [--repeat N]\n"
    "                    [--no-rss] [--device cpu|cuda|cuda:K]\n"
    "       h3 bench vae --vae DIR --latents FILE [--out FILE] [--threads N] [--repeat N]\n"
    "\n"
    "Decodes random latents with a random-weight decoder of the release's shape (heads of 64,\n"
    "24 latent channels) in fp32 on the CPU, one CPU thread per rank (ATen and OpenBLAS):\n"
    "whole-clip vs chunked time, time to the first chunk, the speedup on 2, 4, ... ranks up\n"
    "to --ranks (by wall time, and by the busiest rank's CPU time, which waiting and other\n"
    "load on the machine do not inflate), and the peak resident memory of a 1x and a 4x\n"
    "longer clip decoded through the sink in fresh processes (each after a 1x warm-up\n"
    "decode). Defaults: 4 layers x 256, latent [1, 24, 30, 12, 12]\n"
    "(6 chunks of 17 frames), tiles of 128 px with overlap >= 32 (2 x 2 per clip), 2 ranks.\n"
    "--tile 256 --overlap 64 --latent-h 24 --latent-w 24 uses the release tiles (slower).\n"
    "--device cuda decodes on a GPU (1 rank, no memory probe).\n"
    "\n"
    "h3 bench vae --vae DIR --latents FILE [--out FILE] [--threads N] [--repeat N]\n"
    "decodes the tensor `latents` of FILE with the VAE folder DIR instead (1 rank, N intra-op\n"
    "threads; first an untimed decode of FILE's `warmup` when present), prints `seconds S` per\n"
    "decode and the GEMM rate against at::mm, and writes `frames_f32` and `frames` to --out\n"
    "(scripts/bench-reference.sh runs it beside diffusers).",
    run_bench);

}  // namespace
}  // namespace h3::tools
