// `h3 bench conditioning`: what FL2VA and Ref2VA add before the first denoising step — the video
// VAE's encoder on a keyframe, the Qwen3-VL vision tower on it and the audio VAE's encoder on a
// reference's sound — at the release's sizes (its encoder channels 128 ... 1024, its tower of 27
// blocks of width 1152, its audio encoder 64 ... 2048 wide; random weights, fp32 on the CPU), canvas
// (1344 x 768 by default) and clip (10.125 s of stereo sound by default): time at 1 and 2 rank
// threads (the audio encoder, which runs on rank 0, at 1) and each one's peak resident memory above
// what was resident before it. Figures only; nothing asserts a time.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "audio/audio_encoder.h"
#include "dist/world.h"
#include "text/random_encoder.h"
#include "text/vision_tower.h"
#include "tools/command.h"
#include "tools/process_memory.h"
#include "tools/scratch_dir.h"
#include "tools/tiny_model.h"
#include "vae/cpu_threads.h"
#include "vae/encoder.h"
#include "vae/random_weights.h"

namespace h3::tools {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The release's tower (text_encoder/config.json's vision_config), out width the release's 5120.
text::VisionConfig release_tower() {
  text::VisionConfig v;
  v.depth = 27;
  v.hidden_size = 1152;
  v.num_heads = 16;
  v.intermediate_size = 4304;
  v.patch_size = 16;
  v.temporal_patch_size = 2;
  v.spatial_merge_size = 2;
  v.out_hidden_size = 5120;
  v.num_position_embeddings = 2304;
  v.deepstack_visual_indexes = {8, 16, 24};
  return v;
}

at::Tensor keyframe(int64_t w, int64_t h) {
  at::Generator gen = at::detail::createCPUGenerator(3);
  return at::randint(0, 256, {h, w, 3}, gen, at::TensorOptions().dtype(at::kByte));
}

struct Figure {
  double seconds = 0, peak_mib = 0;
};

// `fn` on `ranks` rank threads (each with its share of the cores), timed on rank 0; the peak
// resident memory above what was resident before.
template <typename Fn>
Figure measure(int ranks, Fn&& fn) {
  const double before = status_mib("VmRSS:");
  reset_peak_rss();
  Figure f;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const auto results = dist::run_threads(ranks, [&](dist::Group& g) {
    vae::set_cpu_threads(std::max(1, cores / ranks));
    const auto t0 = Clock::now();
    fn(g);
    if (g.rank() == 0) f.seconds = since(t0);
  });
  for (const auto& r : results) {
    if (!r.ok) throw Error(ErrorKind::kInternal, "rank " + std::to_string(r.rank) + ": " + r.error);
  }
  f.peak_mib = status_mib("VmHWM:") - before;
  return f;
}

int run(Args& a) {
  const int64_t width = a.int_or("width", 1344, 32, 4096), height = a.int_or("height", 768, 32, 4096);
  const std::string root = a.string_or("dir", std::filesystem::temp_directory_path().string());
  const bool skip_encoder = a.flag("no-encoder"), skip_tower = a.flag("no-tower"),
             skip_audio = a.flag("no-audio");
  const double seconds = a.double_or("seconds", 10.125);
  if (!(seconds > 0 && seconds <= 60)) throw UsageError{"--seconds must be in (0, 60]"};
  a.finish();
  if (width % 32 || height % 32) throw UsageError{"--width and --height must be multiples of 32 (a canvas)"};
  std::printf("keyframe %lldx%lld, fp32, %u cores\n", (long long)width, (long long)height,
              std::thread::hardware_concurrency());
  const at::Tensor picture = keyframe(width, height);

  if (!skip_encoder) {
    vae::VaeConfig c = vae::small_config(1, 1, 64);  // the release's encoder fields are the defaults
    const auto tensors = vae::random_encoder_tensors(c, 5);
    int64_t params = 0;
    for (const auto& [name, t] : tensors) params += t.numel();
    const vae::VideoEncoder enc(c, vae::bind_encoder_weights(c, [&](const std::string& n) {
                                  const auto it = tensors.find(n);
                                  return it == tensors.end() ? at::Tensor() : it->second;
                                }));
    std::printf("VAE encoder: channels 128..1024, %.1f M parameters, 256-px tiles (overlap >= 64)\n",
                static_cast<double>(params) / 1e6);
    for (int ranks : {1, 2}) {
      const Figure f = measure(ranks, [&](dist::Group& g) {
        enc.encode_image(picture.permute({2, 0, 1}), g);
      });
      std::printf("  encode_image  ranks %d  %8.2f s  peak +%.0f MiB\n", ranks, f.seconds, f.peak_mib);
    }
  }
  if (!skip_tower) {
    ScratchDir dir(root, "h3-bench-conditioning-");
    const text::VisionConfig v = release_tower();
    text::EncoderConfig lm = tiny_spec().encoder;  // a small language model beside the tower
    lm.hidden_size = v.out_hidden_size;
    lm.num_layers = 1;
    text::write_random_encoder(dir.path() + "/text_encoder", lm, 9, &v);
    for (int ranks : {1, 2}) {
      const Figure f = measure(ranks, [&](dist::Group& g) {
        const auto tower = text::VisionTower::load(dir.path() + "/text_encoder", ranks > 1 ? &g : nullptr);
        const text::VisionInputs in = tower.preprocess(picture);
        const auto t0 = Clock::now();
        tower.forward(in);
        if (g.rank() == 0) {
          std::printf("  tower forward ranks %d  %8.2f s  (%lld patches, %lld tokens)\n", ranks, since(t0),
                      (long long)in.patches.size(0), (long long)in.tokens(v.spatial_merge_size));
        }
      });
      std::printf("  tower load + preprocess + forward  ranks %d  %8.2f s  peak +%.0f MiB\n", ranks,
                  f.seconds, f.peak_mib);
    }
  }
  if (!skip_audio) {
    audio::AudioVaeConfig c;  // the release's widths and strides
    c.latents_mean.assign(static_cast<size_t>(c.latent_channels), 0.0);
    c.latents_std.assign(static_cast<size_t>(c.latent_channels), 1.0);
    int64_t params = 0;
    for (const auto& [name, t] : audio::random_encoder_checkpoint(c, 5)) params += t.numel();
    const audio::AudioEncoder enc = audio::AudioEncoder::random(c, 5);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const auto samples = static_cast<int64_t>(seconds * static_cast<double>(c.sample_rate));
    const at::Tensor wave = at::randn({2, samples}, gen, at::TensorOptions().dtype(at::kFloat)) * 0.2;
    std::printf("audio VAE encoder: channels 64..2048, %d heads, %.1f M parameters, %.3f s of stereo sound\n",
                static_cast<int>(c.num_attention_heads), static_cast<double>(params) / 1e6, seconds);
    const Figure f = measure(1, [&](dist::Group&) { enc.encode(wave); });
    std::printf("  encode (rank 0)  %8.2f s  peak +%.0f MiB  (%lld latents a channel)\n", f.seconds,
                f.peak_mib, static_cast<long long>(enc.latents_for(samples)));
  }
  return 0;
}

H3_REGISTER_COMMAND(
    "bench conditioning",
    "FL2VA's and Ref2VA's extra work: the VAE encoder and the vision tower on a keyframe, the audio encoder",
    "usage: h3 bench conditioning [--width W] [--height H] [--seconds S] [--no-encoder] [--no-tower]\n"
    "                             [--no-audio] [--dir DIR]\n"
    "\n"
    "At the release's sizes with random weights (fp32, CPU): the video VAE's encoder on one\n"
    "keyframe of W x H (default 1344 x 768, the release's canvas), then the Qwen3-VL vision tower\n"
    "(27 blocks of width 1152; written to a temp folder under DIR and read back) on it, each at 1\n"
    "and 2 rank threads, then the audio VAE's encoder (the release's, 64 ... 2048 channels) on S\n"
    "seconds of stereo 32 kHz sound (default 10.125: the longest clip, 243 frames) on rank 0: seconds\n"
    "and the peak resident memory above what was resident before.\n",
    run);

}  // namespace
}  // namespace h3::tools
