#include "dit/lora.h"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "common/error.h"
#include "common/shape.h"
#include "io/config_json.h"
#include "io/layout.h"
#include "io/safetensors.h"

namespace h3::dit {
namespace {

namespace fs = std::filesystem;

bool starts_with(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// The module path of a key: PEFT wraps the model as base_model.model.<attribute>., and the
// model sits under `dit.` in RAVEN's files, `diffusion_model.` in ComfyUI's, `transformer.` in
// diffusers' pipelines.
std::string module_path(std::string key) {
  if (starts_with(key, "base_model.model.")) key = key.substr(17);
  for (const char* p : {"model.diffusion_model.", "diffusion_model.", "dit.", "transformer."}) {
    if (starts_with(key, p)) return key.substr(std::char_traits<char>::length(p));
  }
  return key;
}

struct Module {
  std::string key_a, key_b;
  at::Tensor a, b, alpha;
};

struct Alphas {
  std::optional<double> metadata;         // the file's `lora_alpha` / `alpha` metadata
  std::optional<double> config;           // adapter_config.json's lora_alpha
  std::map<std::string, double> pattern;  // adapter_config.json's alpha_pattern
  bool rslora = false;
};

double parse_alpha(const std::string& text, const std::string& origin) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v) && v > 0) return v;
  } catch (const std::exception&) {
  }
  throw Error(ErrorKind::kFormat, origin + ": alpha '" + text + "' is not a positive number");
}

Alphas read_alphas(const io::SafetensorsFile& f, const std::string& file, const fs::path& config_path) {
  Alphas out;
  for (const char* key : {"lora_alpha", "alpha"}) {
    auto it = f.metadata().find(key);
    if (it != f.metadata().end()) {
      out.metadata = parse_alpha(it->second, file + " metadata '" + key + "'");
      break;
    }
  }
  if (config_path.empty() || !fs::exists(config_path)) return out;
  const std::string origin = config_path.string();
  const auto j = io::parse_config_json(io::read_text_file(config_path), origin);
  if (j.contains("peft_type") && j["peft_type"].is_string() && j["peft_type"] != "LORA") {
    io::config_error(origin, "peft_type is '" + j["peft_type"].get<std::string>() +
                                 "': only LoRA adapters (peft_type LORA) are supported");
  }
  if (j.contains("use_dora") && j["use_dora"].is_boolean() && j["use_dora"].get<bool>()) {
    io::config_error(origin, "use_dora is true: DoRA adapters are not supported, only plain LoRA");
  }
  double alpha = 0.0;
  io::read_double(j, "lora_alpha", origin, alpha);
  if (j.contains("lora_alpha") && !j["lora_alpha"].is_null()) {
    if (!(alpha > 0) || !std::isfinite(alpha))
      io::config_error(origin, "lora_alpha must be a positive number");
    out.config = alpha;
  }
  if (j.contains("alpha_pattern") && j["alpha_pattern"].is_object()) {
    for (const auto& [k, v] : j["alpha_pattern"].items()) {
      if (!v.is_number() || !(v.get<double>() > 0))
        io::config_error(origin, "alpha_pattern['" + k + "'] must be a positive number");
      out.pattern[k] = v.get<double>();
    }
  }
  if (j.contains("use_rslora") && j["use_rslora"].is_boolean()) out.rslora = j["use_rslora"].get<bool>();
  return out;
}

// alpha of one module and where it came from.
std::pair<double, std::string> alpha_of(const std::string& module, const Module& m, const Alphas& a,
                                        int64_t r) {
  if (m.alpha.defined()) return {m.alpha.to(at::kDouble).item<double>(), "tensor"};
  for (const auto& [k, v] : a.pattern) {
    if (module == k || ends_with(module, "." + k)) return {v, "adapter_config.json alpha_pattern"};
  }
  if (a.metadata) return {*a.metadata, "metadata"};
  if (a.config) return {*a.config, "adapter_config.json"};
  return {static_cast<double>(r), "none (alpha = r)"};
}

// The diffusers layers one module adapts, with the rows of B each takes.
struct Target {
  std::string weight;  // canonical weight name
  io::Rearrange how = io::Rearrange::kIdentity;
  int part = 0;
};

std::vector<Target> targets_of(const std::string& module, const std::map<std::string, ParamSpec>& declared,
                               const std::string& file) {
  if (declared.count(module + ".weight")) return {{module + ".weight"}};
  std::vector<io::CanonicalPiece> pieces;
  try {
    pieces = io::native_to_canonical(io::ModelKind::kDit, module + ".weight");
  } catch (const Error&) {
  }
  if (pieces.empty()) {
    throw Error(ErrorKind::kFormat, file + ": LoRA module '" + module +
                                        "' is no layer of the H3 DiT (neither a native nor a diffusers "
                                        "name): is this a LoRA for another model?");
  }
  std::vector<Target> out;
  for (const auto& p : pieces) out.push_back({p.name, p.how, p.part});
  return out;
}

// This rank's part of a full tensor along `dim`.
at::Tensor shard(const at::Tensor& t, int64_t dim, int rank, int size) {
  const int64_t n = t.size(dim) / size;
  return t.narrow(dim, rank * n, n);
}

}  // namespace

LoraSummary attach_lora(DitWeights& w, const DitConfig& c, const std::string& path, int tp_rank,
                        int tp_size) {
  fs::path file = path;
  fs::path config_path;
  if (fs::is_directory(file)) {
    config_path = file / "adapter_config.json";
    file = file / "adapter_model.safetensors";
  } else {
    config_path = file.parent_path() / "adapter_config.json";
  }
  if (!fs::exists(file)) {
    throw Error(ErrorKind::kNotFound,
                "LoRA file " + file.string() +
                    " does not exist: give a PEFT adapter_model.safetensors or its folder");
  }
  const std::string name = file.string();
  auto st = io::SafetensorsFile::open(name);
  const Alphas alphas = read_alphas(*st, name, config_path);

  // Group the keys by module.
  std::map<std::string, Module> modules;
  for (const auto& info : st->tensors()) {
    const std::string& key = info.name;
    std::string stem;
    int which = -1;  // 0 A, 1 B, 2 alpha
    for (auto [suffix, k] : {std::pair<const char*, int>{".lora_A.weight", 0},
                             {".lora_B.weight", 1},
                             {".lora_down.weight", 0},
                             {".lora_up.weight", 1},
                             {".alpha", 2}}) {
      if (ends_with(key, suffix)) {
        stem = key.substr(0, key.size() - std::char_traits<char>::length(suffix));
        which = k;
        break;
      }
    }
    if (which < 0) {
      throw Error(ErrorKind::kFormat, name + ": tensor '" + key +
                                          "' is not a LoRA tensor (<module>.lora_A.weight, .lora_B.weight or "
                                          ".alpha): is this a PEFT LoRA file?");
    }
    Module& m = modules[module_path(stem)];
    at::Tensor t = st->view(info).to(at::kFloat);
    if (which == 2) {
      m.alpha = t;
      continue;
    }
    if (t.dim() != 2) {
      throw Error(ErrorKind::kFormat, name + ": tensor '" + key + "' has shape " + shape_string(t.sizes()) +
                                          ": LoRA A and B are 2-D");
    }
    if (!at::isfinite(t).all().item<bool>()) {
      throw Error(ErrorKind::kFormat,
                  name + ": tensor '" + key + "' holds NaN or infinite values: the LoRA file is damaged");
    }
    (which == 0 ? m.a : m.b) = t.contiguous();
    (which == 0 ? m.key_a : m.key_b) = key;
  }
  if (modules.empty()) throw Error(ErrorKind::kFormat, name + ": holds no LoRA tensors");

  std::map<std::string, ParamSpec> declared;
  for (auto& spec : dit_parameters(c)) declared.emplace(spec.name, spec);
  std::map<std::string, Adapter> bound;  // canonical weight name -> this rank's adapter
  LoraSummary sum;
  sum.file = name;
  for (const auto& [module, m] : modules) {
    if (!m.a.defined() || !m.b.defined()) {
      throw Error(ErrorKind::kFormat, name + ": LoRA module '" + module + "' has only its " +
                                          (m.a.defined() ? "lora_A" : "lora_B") + " tensor");
    }
    const int64_t r = m.a.size(0);
    if (m.b.size(1) != r) {
      throw Error(ErrorKind::kFormat, name + ": LoRA module '" + module + "' has lora_A " +
                                          shape_string(m.a.sizes()) + " and lora_B " +
                                          shape_string(m.b.sizes()) + ": their ranks differ");
    }
    auto [alpha, source] = alpha_of(module, m, alphas, r);
    if (!(alpha > 0) || !std::isfinite(alpha)) {
      throw Error(ErrorKind::kFormat, name + ": LoRA module '" + module + "' has alpha " +
                                          std::to_string(alpha) + ": it must be a positive number");
    }
    const double scale =
        alphas.rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
    const auto targets = targets_of(module, declared, name);
    for (const Target& t : targets) {
      auto it = declared.find(t.weight);
      const ParamSpec* spec = it == declared.end() ? nullptr : &it->second;
      if (spec == nullptr || spec->shape.size() != 2) {
        throw Error(
            ErrorKind::kMismatch,
            name + ": LoRA module '" + module + "' adapts '" + t.weight + "', " +
                (spec ? "which is not a linear layer"
                      : "which this model does not have (it has " + std::to_string(c.num_layers) +
                            " blocks and " + std::to_string(c.num_refiner_layers) + " refiner blocks)") +
                ": the LoRA was made for another model");
      }
      const int64_t out = spec->shape[0], in = spec->shape[1];
      const int64_t rows = t.how == io::Rearrange::kQkvPart ? 3 * out : out;
      if (m.a.size(1) != in || m.b.size(0) != rows) {
        throw Error(ErrorKind::kMismatch,
                    name + ": LoRA module '" + module + "' has lora_A " + shape_string(m.a.sizes()) +
                        " and lora_B " + shape_string(m.b.sizes()) + " but '" + t.weight + "' is " +
                        shape_string(spec->shape) + " (lora_A needs [r, " + std::to_string(in) +
                        "], lora_B [" + std::to_string(rows) + ", r]): the LoRA was made for another model");
      }
      at::Tensor up = m.b;
      if (t.how == io::Rearrange::kQkvPart) up = up.narrow(0, t.part * out, out);  // [Q; K; V] blocks
      if (t.how == io::Rearrange::kSwapHalves)
        up = at::cat({up.narrow(0, out / 2, out / 2), up.narrow(0, 0, out / 2)});
      at::Tensor down = m.a;
      switch (spec->split) {
        case io::Split::kColumn: up = shard(up, 0, tp_rank, tp_size); break;
        case io::Split::kFusedColumn: {
          const int64_t half = out / 2;
          up = at::cat({shard(up.narrow(0, 0, half), 0, tp_rank, tp_size),
                        shard(up.narrow(0, half, half), 0, tp_rank, tp_size)});
          break;
        }
        case io::Split::kRow: down = shard(down, 1, tp_rank, tp_size); break;
        case io::Split::kReplicated: break;
      }
      // Where the layer's weight lives (a CUDA device with device = cuda), in fp32.
      const c10::Device device =
          w.proj_in.weight.defined() ? w.proj_in.weight.device() : c10::Device(c10::kCPU);
      if (!bound.emplace(t.weight, Adapter{down.contiguous().to(device), up.contiguous().to(device), scale})
               .second) {
        throw Error(ErrorKind::kFormat, name + ": '" + t.weight + "' is adapted twice (module '" + module +
                                            "' and another name for the same layer)");
      }
      ++sum.adapted_layers;
    }
    if (sum.modules == 0) {
      sum.alpha = alpha;
      sum.alpha_source = source;
    }
    ++sum.modules;
    sum.rank = std::max(sum.rank, r);
  }

  // Every module fits a layer that has an adapter slot: bind them all at once (nothing
  // changes when anything above threw).
  std::set<std::string> slots;
  declare_adapters(static_cast<const DitWeights&>(w),
                   [&](const std::string& weight, const Adapter&) { slots.insert(weight); });
  for (const auto& [weight, a] : bound) {
    if (!slots.count(weight)) {
      throw Error(
          ErrorKind::kMismatch,
          name + ": '" + weight + "' is a layer the engine applies no LoRA to (see docs/causal.md \"LoRA\")");
    }
  }
  declare_adapters(w, [&](const std::string& weight, Adapter& slot) {
    auto it = bound.find(weight);
    slot = it == bound.end() ? Adapter{} : it->second;
    if (it != bound.end()) sum.layers.push_back(weight);
  });
  return sum;
}

void detach_lora(DitWeights& w) {
  declare_adapters(w, [](const std::string&, Adapter& slot) { slot = Adapter{}; });
}

}  // namespace h3::dit
