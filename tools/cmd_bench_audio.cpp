// `h3 bench audio`: the audio VAE decode's real-time factor (seconds of audio per second of
// compute) at the embedded tiny model's widths and at the release's widths (random weights,
// the release config), whole and streamed in video-chunk-sized pieces with their context.
// Prints figures; asserts nothing about speed. decode() returns the waveform on the CPU, so
// a GPU decode is complete when it returns.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "audio/audio_decoder.h"
#include "common/device.h"
#include "tools/command.h"
#include "tools/tiny_model.h"
#include "vae/cpu_threads.h"

namespace h3::tools {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void bench_one(const char* label, const audio::AudioDecoder& decoder, int64_t latents, int repeat) {
  at::Generator gen = at::detail::createCPUGenerator(5);
  const at::Tensor rows =
      at::randn({2 * latents, decoder.config().latent_channels}, gen, at::TensorOptions().dtype(at::kFloat));
  const double audio_s = static_cast<double>(latents * decoder.samples_per_latent()) / decoder.sample_rate();
  decoder.decode(rows.slice(0, 0, 2).contiguous());  // warm-up: one latent per channel
  double whole = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    decoder.decode(rows);
    whole = std::min(whole, seconds_since(t0));
  }
  // Streamed: pieces of one 17-frame video chunk (round(17 · 5/3) = 28 latents), each with
  // its context: the first piece's latency and the total.
  const int64_t piece = 28;
  double first = 0, streamed = 0;
  const auto t0 = Clock::now();
  for (int64_t b = 0; b < latents; b += piece) {
    decoder.decode_range(rows, b, std::min(latents, b + piece));
    if (b == 0) first = seconds_since(t0);
  }
  streamed = seconds_since(t0);
  std::printf(
      "%-8s latent_dim %5lld decoder_dim %5lld kernels %zu  A %4lld (%.2f s audio, context %lld): whole %.3f "
      "s "
      "(real-time factor %.2f x), streamed in %lld-latent pieces %.3f s (%.2f x, first piece after %.3f s)\n",
      label, static_cast<long long>(decoder.config().latent_dim),
      static_cast<long long>(decoder.config().decoder_dim), decoder.config().resblock_kernel_sizes.size(),
      static_cast<long long>(latents), audio_s, static_cast<long long>(decoder.context_latents()), whole,
      audio_s / whole, static_cast<long long>(piece), streamed, audio_s / streamed, first);
  std::fflush(stdout);
}

int run_bench_audio(Args& a) {
  const double tiny_seconds = a.double_or("seconds", 10.0);
  const double release_seconds = a.double_or("release-seconds", 0.5);
  const int threads = static_cast<int>(a.int_or("threads", 0, 0, 1024));
  const int repeat = static_cast<int>(a.int_or("repeat", 1, 1, 100));
  const std::string device_name = a.string_or("device", "cpu");
  a.finish();
  if (!a.positional().empty()) throw UsageError{"unexpected argument '" + a.positional().front() + "'"};
  if (tiny_seconds < 0 || release_seconds < 0)
    throw UsageError{"--seconds and --release-seconds must not be negative"};
  const c10::Device device = parse_device(device_name, "--device");
  if (threads > 0) vae::set_cpu_threads(threads);
  std::printf(
      "h3 bench audio: fp32 on %s, %d CPU thread(s); real-time factor = seconds of audio per second "
      "of compute\n",
      device.str().c_str(), at::get_num_threads());
  const auto latents_of = [](double s) { return std::max<int64_t>(1, static_cast<int64_t>(s * 40.0 + 0.5)); };
  if (tiny_seconds > 0) {
    bench_one("tiny", audio::AudioDecoder::random(tiny_spec().audio, 1).to(device), latents_of(tiny_seconds),
              repeat);
  }
  if (release_seconds > 0) {
    audio::AudioVaeConfig release = audio::small_config(2048, 1024, 3);  // release widths, random statistics
    bench_one("release", audio::AudioDecoder::random(release, 1).to(device), latents_of(release_seconds),
              repeat);
  }
  return 0;
}

H3_REGISTER_COMMAND("bench audio", "audio VAE decode: real-time factor at the tiny and the release widths",
                    "usage: h3 bench audio [--seconds S] [--release-seconds S] [--threads N] [--repeat N]\n"
                    "                      [--device cpu|cuda|cuda:K]\n"
                    "\n"
                    "Decodes random audio rows with random-weight audio VAE decoders in fp32: the embedded\n"
                    "tiny model's widths and the release's (latent_dim 2048, decoder_dim 1024, kernels\n"
                    "3/7/11). Prints, for each, the whole decode's time and real-time factor (seconds of\n"
                    "audio per second of compute; best of --repeat), and the same audio streamed in\n"
                    "28-latent pieces (one 17-frame video chunk) each with its context, with the time to\n"
                    "the first piece.\n"
                    "\n"
                    "  --seconds S          audio at the tiny widths (default 10; 0 skips)\n"
                    "  --release-seconds S  audio at the release widths (default 0.5; 0 skips: on a CPU\n"
                    "                       this is tens of seconds per second of audio)\n"
                    "  --threads N          CPU threads (default: ATen's)\n"
                    "  --repeat N           whole decodes timed, the best kept (default 1)\n"
                    "  --device D           cpu (default), cuda or cuda:K",
                    run_bench_audio);

}  // namespace
}  // namespace h3::tools
