// `h3 decode`: normalised DiT latents in a safetensors file -> decoded frames.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>

#include "common/device.h"
#include "dist/group.h"
#include "dist/world.h"
#include "h3/error.h"
#include "h3/limits.h"
#include "io/safetensors.h"
#include "tools/command.h"
#include "vae/cpu_threads.h"
#include "vae/video_decoder.h"

namespace h3::tools {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Rank 0's sink: copies each chunk into the output tensors and reports progress.
class FileSink : public ChunkSink {
 public:
  FileSink(int64_t chunks, Clock::time_point t0) : chunks_(chunks), t0_(t0) {}
  void on_chunk(const Chunk& c) override {
    if (!frames.defined()) {
      std::vector<int64_t> shape = c.frames.sizes().vec();
      shape[0] = c.total_frames;
      frames = at::empty(shape, c.frames.options());
      frames_f32 = at::empty(shape, c.frames_f32.options());
    }
    const int64_t n = c.frames.size(0);
    frames.narrow(0, c.first_frame, n).copy_(c.frames);
    frames_f32.narrow(0, c.first_frame, n).copy_(c.frames_f32);
    chunk_frames.push_back(n);
    std::fprintf(stderr, "h3 decode: chunk %lld/%lld: frames %lld..%lld of %lld (%.2f s)\n",
                 static_cast<long long>(c.index + 1), static_cast<long long>(chunks_),
                 static_cast<long long>(c.first_frame), static_cast<long long>(c.first_frame + n - 1),
                 static_cast<long long>(c.total_frames), seconds_since(t0_));
  }
  at::Tensor frames, frames_f32;
  std::vector<int64_t> chunk_frames;

 private:
  int64_t chunks_;
  Clock::time_point t0_;
};

int run_decode(Args& a) {
  const std::string vae_dir = a.string("vae");
  const std::string latents_path = a.string("latents");
  const std::string out_path = a.string("out");
  const int ranks = static_cast<int>(a.int_or("ranks", 1, kMinRanks, kMaxRanks));
  const bool no_tiling = a.flag("no-tiling");
  const int64_t height = a.int_or("height", 0, 0, 1 << 16);
  const int64_t width = a.int_or("width", 0, 0, 1 << 16);
  const std::string device_name = a.string_or("device", "cpu");
  a.finish();
  // On CUDA, rank r decodes on cuda:r and the ranks talk NCCL.
  const c10::Device device = parse_device(device_name, "--device");
  if (device.is_cuda() && ranks > 1) require_cuda_devices(ranks, "--device");
  if (!a.positional().empty()) throw UsageError{"unexpected argument '" + a.positional().front() + "'"};

  const auto t0 = Clock::now();
  const auto file = io::SafetensorsFile::open(latents_path);
  const at::Tensor latents = file->view("latents");
  const vae::VideoDecoder decoder = vae::VideoDecoder::load(vae_dir);
  if (latents.dim() != 5) {
    throw Error(ErrorKind::kInvalidArgument, latents_path +
                                                 ": tensor 'latents' must be [1, 24, T, h, w], not " +
                                                 std::to_string(latents.dim()) + "-dimensional");
  }
  const vae::ChunkPlan plan = decoder.plan(latents.size(2));
  std::fprintf(
      stderr, "h3 decode: %s: latents [%s] -> %lld frames in %lld chunks (%lld clips), %d rank(s), %s\n",
      latents_path.c_str(),
      [&] {
        std::string s;
        for (int64_t d = 0; d < latents.dim(); ++d) s += (d ? ", " : "") + std::to_string(latents.size(d));
        return s;
      }()
          .c_str(),
      static_cast<long long>(plan.output_frames), static_cast<long long>(plan.chunks.size()),
      static_cast<long long>(plan.num_clips), ranks, no_tiling ? "tiling off" : "tiling on");

  vae::DecodeOptions opts;
  if (no_tiling) opts.tiling = false;
  opts.height = height;
  opts.width = width;
  opts.float_frames = true;
  FileSink sink(static_cast<int64_t>(plan.chunks.size()), t0);
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks);
  dist::WorldOptions wo;
  if (device.is_cuda() && ranks > 1) wo.backend = dist::Backend::kNccl;
  const auto results = dist::run_threads(
      ranks,
      [&](dist::Group& g) {
        vae::set_cpu_threads(threads);
        if (!device.is_cuda()) {
          decoder.decode_chunks(latents, g.rank() == 0 ? &sink : nullptr, g, opts);
          return;
        }
        const c10::Device mine =
            ranks > 1 ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(g.rank())) : device;
        decoder.to(mine).decode_chunks(latents, g.rank() == 0 ? &sink : nullptr, g, opts);
      },
      wo);
  dist::rethrow_first_failure(results);

  std::string sizes;
  for (int64_t n : sink.chunk_frames) sizes += (sizes.empty() ? "" : ",") + std::to_string(n);
  io::write_safetensors(out_path, {{"frames", sink.frames}, {"frames_f32", sink.frames_f32}},
                        {{"chunk_frames", sizes}, {"vae", vae_dir}, {"latents", latents_path}});
  std::fprintf(stderr, "h3 decode: wrote %s: %lld frames of %lldx%lld in %.2f s\n", out_path.c_str(),
               static_cast<long long>(sink.frames.size(0)), static_cast<long long>(sink.frames.size(2)),
               static_cast<long long>(sink.frames.size(1)), seconds_since(t0));
  return 0;
}

H3_REGISTER_COMMAND("decode", "decode video latents to frames with the H3 video VAE",
                    "usage: h3 decode --vae DIR --latents FILE --out FILE [--ranks N] [--no-tiling]\n"
                    "                 [--height H] [--width W] [--device cpu|cuda|cuda:K]\n"
                    "\n"
                    "Decodes normalised DiT latents (tensor `latents` [1, 24, T, h, w] in a safetensors\n"
                    "file) with the video VAE in DIR: a diffusers vae/ folder (config.json + weights) or a\n"
                    "native video_vae/ folder (wrapper config.json + source/). Chunks are decoded in\n"
                    "fp32 on the CPU (or the GPU with --device); progress goes to stderr.\n"
                    "\n"
                    "  --vae DIR        the video VAE folder\n"
                    "  --latents FILE   safetensors file holding `latents`\n"
                    "  --out FILE       output safetensors: `frames` uint8 [T, H, W, 3] and\n"
                    "                   `frames_f32` float32 [T, H, W, 3] in [0, 1]\n"
                    "  --ranks N        decode spatial tiles on N ranks (threads); default 1\n"
                    "  --no-tiling      decode each temporal clip whole (changes the output)\n"
                    "  --height H       crop the frames to H rows (default: 16 h)\n"
                    "  --width W        crop the frames to W columns (default: 16 w)\n"
                    "  --device D       cpu (default), cuda or cuda:K; with --ranks N on CUDA rank r\n"
                    "                   decodes on cuda:r and the ranks talk NCCL",
                    run_decode);

}  // namespace
}  // namespace h3::tools
