// `h3 dit-forward`: one forward of the DiT on inputs from a safetensors file, for comparing
// against other implementations of the model.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "common/device.h"
#include "dist/group.h"
#include "dist/world.h"
#include "dit/transformer.h"
#include "h3/error.h"
#include "h3/limits.h"
#include "io/safetensors.h"
#include "tools/command.h"
#include "tools/dit_inputs_file.h"

namespace h3::tools {
namespace {

int run(Args& args) {
  const std::string dir = args.string("transformer");
  const std::string inputs = args.string("inputs");
  const std::string out = args.string("out");
  const int ranks = static_cast<int>(args.int_or("ranks", 1, kMinRanks, kMaxRanks));
  const std::string device_name = args.string_or("device", "cpu");
  const std::string dtype_name = args.string_or("dtype", "");
  args.finish();
  // With several ranks on CUDA, rank r runs on cuda:r and the ranks talk NCCL.
  const c10::Device device = parse_device(device_name, "--device");
  if (device.is_cuda() && ranks > 1) require_cuda_devices(ranks, "--device");
  dit::TransformerOptions to;
  if (dtype_name == "fp32") {
    to.dtype = at::kFloat;
  } else if (dtype_name == "bf16") {
    to.dtype = at::kBFloat16;
  } else if (!dtype_name.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "--dtype " + dtype_name + ": expected fp32 or bf16");
  }

  const auto in = read_dit_inputs(inputs);
  const auto start = std::chrono::steady_clock::now();
  dit::Velocity v;
  if (ranks == 1) {
    to.device = device;
    v = dit::Transformer::load(dir, nullptr, to).forward(in);
  } else {
    const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks);
    dist::WorldOptions wo;
    if (device.is_cuda()) wo.backend = dist::Backend::kNccl;
    auto results = dist::run_threads(
        ranks,
        [&](dist::Group& g) {
          at::set_num_threads(threads);
          dit::TransformerOptions rank_to = to;
          rank_to.device =
              device.is_cuda() ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(g.rank())) : device;
          auto model = dit::Transformer::load(dir, &g, rank_to);
          auto r = model.forward(in);
          if (g.rank() == 0) v = r;
        },
        wo);
    dist::rethrow_first_failure(results);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  io::write_safetensors(out, {{"velocity_video", v.video.to(at::kCPU, at::kFloat).contiguous()},
                              {"velocity_audio", v.audio.to(at::kCPU, at::kFloat).contiguous()}});
  std::printf("velocity_video %s, velocity_audio %s -> %s (%d rank%s on %s, %.2f s)\n",
              c10::str(v.video.sizes()).c_str(), c10::str(v.audio.sizes()).c_str(), out.c_str(), ranks,
              ranks == 1 ? "" : "s", device.str().c_str(), secs);
  return 0;
}

H3_REGISTER_COMMAND(
    "dit-forward", "one forward of the H3 DiT on inputs from a safetensors file",
    "usage: h3 dit-forward --transformer DIR --inputs FILE --out FILE [--ranks N] [--device D]\n"
    "                       [--dtype fp32|bf16]\n"
    "\n"
    "  --transformer DIR  transformer folder as in the release: config.json + safetensors\n"
    "                     (one file or an index; diffusers or native layout)\n"
    "  --inputs FILE      safetensors with video [1, 24, T, h, w] fp32 noisy latents,\n"
    "                     audio [2A, 32] fp32, text [L, text_dim], optional tags [L] (int),\n"
    "                     t_video and t_audio (0-d fp32, t = 1 - sigma)\n"
    "  --out FILE         safetensors written with velocity_video and velocity_audio (fp32)\n"
    "  --ranks N          tensor-parallel ranks, as threads of this process (default 1)\n"
    "  --device D         cpu (default), cuda or cuda:K; with --ranks N on CUDA rank r uses\n"
    "                     cuda:r and the ranks talk NCCL\n"
    "  --dtype T          fp32 or bf16 block weights and residual stream (default: fp32 on\n"
    "                     the CPU, bf16 on CUDA as released)",
    run);

}  // namespace
}  // namespace h3::tools
