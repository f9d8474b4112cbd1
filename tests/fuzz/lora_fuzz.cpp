// libFuzzer target for the LoRA loader (dit/lora.h): the input is a LoRA as a user hands it over,
// a safetensors file and, when the first byte is odd, an adapter_config.json beside it (the text
// up to the first NUL after that byte; the file is what follows). attach_lora on the tiny golden
// DiT's adapter slots must bind adapters whose shapes and scales are sound, or refuse with an
// h3::Error leaving every slot empty. Anything else (a crash, a sanitizer report, another
// exception, a NaN scale) is a bug.
#include <ATen/ATen.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "dit/lora.h"
#include "h3/error.h"

namespace {

namespace fs = std::filesystem;

// tests/data/golden/h3_dit/transformer_tiny/config.json
constexpr const char* kTinyConfig =
    R"({"num_attention_heads": 2, "attention_head_dim": 128, "hidden_size": 128,
  "num_layers": 2, "num_refiner_layers": 2, "ffn_dim": 256, "in_channels": 24, "audio_in_channels": 32,
  "patch_size": [1, 2, 2], "text_dim": 64, "freq_dim": 256, "time_embed_hidden_dim": 128, "time_embed_dim": 64,
  "rope_freq_dim": 16, "rope_theta": 10000.0, "norm_eps": 1e-05, "qk_norm_eps": 1e-05, "final_norm_eps": 1e-05})";

const fs::path& folder() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("h3-lora-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace h3::dit;
  static const DitConfig c = DitConfig::parse(kTinyConfig, "the fuzzer's tiny config");
  if (size == 0) return 0;
  const std::string in(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string config, file = in;
  if (data[0] & 1) {
    const size_t nul = in.find('\0');
    config = in.substr(0, nul);
    file = nul == std::string::npos ? std::string() : in.substr(nul + 1);
  }
  const fs::path d = folder();
  std::ofstream(d / "adapter_model.safetensors", std::ios::binary | std::ios::trunc) << file;
  if (data[0] & 1) {
    std::ofstream(d / "adapter_config.json", std::ios::binary | std::ios::trunc) << config;
  } else {
    fs::remove(d / "adapter_config.json");
  }
  DitWeights w;
  w.blocks.resize(static_cast<size_t>(c.num_layers));
  w.refiner.resize(static_cast<size_t>(c.num_refiner_layers));
  bool refused = false;
  try {
    const LoraSummary s = attach_lora(w, c, d.string());
    if (s.modules <= 0 || s.adapted_layers < s.modules || s.rank <= 0) std::abort();
  } catch (const h3::Error&) {
    refused = true;
  }
  const auto specs = dit_parameters(c);
  declare_adapters(static_cast<const DitWeights&>(w), [&](const std::string& weight, const Adapter& a) {
    if (!a.defined()) return;
    if (refused) std::abort();  // a refused file left an adapter behind
    if (!std::isfinite(a.scale) || !(a.scale > 0)) std::abort();
    for (const auto& spec : specs) {
      if (spec.name != weight) continue;
      // B [out, r] and A [r, in] of the layer's shape, finite.
      if (a.up.dim() != 2 || a.down.dim() != 2 || a.up.size(0) != spec.shape[0] ||
          a.down.size(1) != spec.shape[1] || a.up.size(1) != a.down.size(0)) {
        std::abort();
      }
      if (!at::isfinite(a.up).all().item<bool>() || !at::isfinite(a.down).all().item<bool>()) std::abort();
    }
  });
  return 0;
}
