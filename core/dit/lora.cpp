#include "dit/lora.h"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "common/shape.h"
#include "dit/lora_config.h"
#include "h3/error.h"
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

// One module's tensors as the file holds them, each with the key it came under.
struct Module {
  std::string peft_name;  // the key's stem without "base_model.model.": what PEFT's patterns match
  std::string key_a, key_b, key_alpha;
  at::Tensor a, b, alpha;
};

// Where each module's alpha and the scaling rule come from, in the order they are asked
// (docs/causal.md "LoRA"): the file's own settings first (diffusers' lora_adapter_metadata, then
// a plain `lora_alpha` / `alpha` metadata value), then adapter_config.json beside it.
struct Settings {
  std::optional<LoraConfig> own;     // the file's lora_adapter_metadata
  std::optional<double> metadata;    // the file's `lora_alpha` / `alpha` metadata
  std::optional<LoraConfig> folder;  // adapter_config.json
  bool rslora() const { return own ? own->use_rslora : folder && folder->use_rslora; }
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

Settings read_settings(const io::SafetensorsFile& f, const std::string& file, const fs::path& config_path) {
  Settings out;
  const auto& meta = f.metadata();
  if (auto it = meta.find("lora_adapter_metadata"); it != meta.end()) {
    out.own = parse_lora_config(it->second, file + " metadata 'lora_adapter_metadata'", "transformer");
  }
  for (const char* key : {"lora_alpha", "alpha"}) {
    auto it = meta.find(key);
    if (it != meta.end()) {
      out.metadata = parse_alpha(it->second, file + " metadata '" + key + "'");
      break;
    }
  }
  if (!config_path.empty() && fs::exists(config_path)) {
    out.folder = parse_lora_config(io::read_text_file(config_path), config_path.string());
  }
  return out;
}

// The alpha a config gives `m`: its alpha_pattern entry, else its lora_alpha; `label` names the
// config in the summary.
std::optional<std::pair<double, std::string>> config_alpha(const LoraConfig& c, const Module& m,
                                                           const std::string& module,
                                                           const std::string& label) {
  const auto* p = match_pattern(c.alpha_pattern, m.peft_name);
  if (!p) p = match_pattern(c.alpha_pattern, module);
  if (p) return std::make_pair(p->value, label + " alpha_pattern '" + p->key + "'");
  if (c.lora_alpha) return std::make_pair(*c.lora_alpha, label);
  return std::nullopt;
}

// alpha of one module and where it came from (LoraSummary::alpha_source).
std::pair<double, std::string> alpha_of(const std::string& module, const Module& m, const Settings& s,
                                        int64_t r, const std::string& file) {
  if (m.alpha.defined()) {
    if (m.alpha.numel() != 1) {
      throw Error(ErrorKind::kFormat, file + ": tensor '" + m.key_alpha + "' has shape " +
                                          shape_string(m.alpha.sizes()) + ": a module's alpha is one number");
    }
    return {m.alpha.to(at::kDouble).item<double>(), "tensor"};
  }
  if (s.own) {
    if (auto a = config_alpha(*s.own, m, module, "lora_adapter_metadata")) return *a;
  }
  if (s.metadata) return {*s.metadata, "metadata"};
  if (s.folder) {
    if (auto a = config_alpha(*s.folder, m, module, "adapter_config.json")) return *a;
  }
  return {static_cast<double>(r), "none (alpha = r)"};
}

// The rank each config says `m` has (rank_pattern, else r) must be the rank its tensors have:
// PEFT builds the layer at that rank and could not load these tensors into it.
void check_rank(const LoraConfig& c, const Module& m, const std::string& module, int64_t r,
                const std::string& file) {
  const auto* p = match_pattern(c.rank_pattern, m.peft_name);
  if (!p) p = match_pattern(c.rank_pattern, module);
  if (!p && !c.r) return;
  const int64_t want = p ? p->value : *c.r;
  if (want == r) return;
  throw Error(ErrorKind::kFormat,
              file + ": LoRA module '" + module + "' has rank " + std::to_string(r) + " (lora_A " +
                  shape_string(m.a.sizes()) + ") but " + c.origin + " gives it rank " + std::to_string(want) +
                  (p ? " (rank_pattern '" + p->key + "')" : " (r)") +
                  ": the settings are not this file's; give the adapter_config.json it was saved with");
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
  if (pieces.empty() && (starts_with(module, "lora_unet_") || starts_with(module, "lora_te"))) {
    throw Error(ErrorKind::kFormat,
                file + ": LoRA module '" + module +
                    "' is named as kohya's scripts flatten names (dots turned into "
                    "underscores), which are not read: give the module names with their "
                    "dots (e.g. diffusion_model.blocks.0.attn.qkv_proj.lora_down.weight)");
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
  std::error_code ec;
  if (fs::is_directory(file, ec)) {
    config_path = file / "adapter_config.json";
    file = file / "adapter_model.safetensors";
  } else {
    config_path = file.parent_path() / "adapter_config.json";
  }
  if (!fs::exists(file, ec)) {
    throw Error(ErrorKind::kNotFound,
                "LoRA file " + file.string() +
                    " does not exist: give a PEFT adapter_model.safetensors or its folder");
  }
  const std::string name = file.string();
  auto st = io::SafetensorsFile::open(name);
  const Settings settings = read_settings(*st, name, config_path);

  // Group the keys by module; each of a module's tensors given once.
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
      throw Error(ErrorKind::kFormat,
                  name + ": tensor '" + key +
                      "' is not a LoRA tensor (<module>.lora_A.weight, .lora_B.weight, "
                      ".lora_down.weight, .lora_up.weight or .alpha): is this a LoRA file?");
    }
    const std::string module = module_path(stem);
    Module& m = modules[module];
    if (m.peft_name.empty()) m.peft_name = starts_with(stem, "base_model.model.") ? stem.substr(17) : stem;
    std::string& seen = which == 0 ? m.key_a : which == 1 ? m.key_b : m.key_alpha;
    if (!seen.empty()) {
      static const char* const kWhat[] = {"lora_A (lora_down)", "lora_B (lora_up)", "alpha"};
      throw Error(ErrorKind::kFormat, name + ": tensors '" + seen + "' and '" + key + "' are both module '" +
                                          module + "''s " + kWhat[which] +
                                          ": give each module's tensors once");
    }
    seen = key;
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
  }
  if (modules.empty()) {
    throw Error(ErrorKind::kFormat, name + ": holds no LoRA tensors (" +
                                        std::to_string(st->tensors().size()) +
                                        " tensors): it adapts nothing");
  }

  std::map<std::string, ParamSpec> declared;
  for (auto& spec : dit_parameters(c)) declared.emplace(spec.name, spec);
  // The layers that have an adapter slot in `w` (every linear layer of its blocks).
  std::set<std::string> slots;
  declare_adapters(static_cast<const DitWeights&>(w),
                   [&](const std::string& weight, const Adapter&) { slots.insert(weight); });
  std::map<std::string, std::pair<Adapter, std::string>> bound;  // weight -> this rank's adapter, module
  LoraSummary sum;
  sum.file = name;
  for (const auto& [module, m] : modules) {
    if (!m.a.defined() || !m.b.defined()) {
      throw Error(ErrorKind::kFormat, name + ": LoRA module '" + module + "' has only its " +
                                          (m.a.defined()   ? "lora_A tensor, no lora_B"
                                           : m.b.defined() ? "lora_B tensor, no lora_A"
                                                           : "alpha, neither lora_A nor lora_B") +
                                          ": the LoRA file is incomplete");
    }
    const int64_t r = m.a.size(0);
    if (m.b.size(1) != r) {
      throw Error(ErrorKind::kFormat, name + ": LoRA module '" + module + "' has lora_A " +
                                          shape_string(m.a.sizes()) + " and lora_B " +
                                          shape_string(m.b.sizes()) + ": their ranks differ");
    }
    if (r == 0) {
      throw Error(ErrorKind::kFormat, name + ": LoRA module '" + module + "' has rank 0 (lora_A " +
                                          shape_string(m.a.sizes()) + "): it adapts nothing");
    }
    if (settings.own) check_rank(*settings.own, m, module, r, name);
    if (settings.folder) check_rank(*settings.folder, m, module, r, name);
    auto [alpha, source] = alpha_of(module, m, settings, r, name);
    if (!(alpha > 0) || !std::isfinite(alpha)) {
      throw Error(ErrorKind::kFormat, name + ": LoRA module '" + module + "' has alpha " +
                                          std::to_string(alpha) + " (" + source +
                                          "): it must be a positive number");
    }
    // PEFT's scaling: alpha / r, or alpha / sqrt(r) for rank-stabilised LoRA.
    const double scale =
        settings.rslora() ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
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
      if (!slots.count(t.weight)) {
        throw Error(ErrorKind::kMismatch, name + ": LoRA module '" + module + "' adapts '" + t.weight +
                                              "', a layer these weights apply no LoRA to (they hold " +
                                              std::to_string(w.blocks.size()) + " blocks and " +
                                              std::to_string(w.refiner.size()) +
                                              " refiner blocks; see docs/causal.md \"LoRA\")");
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
      const auto [at_, fresh] = bound.emplace(
          t.weight,
          std::make_pair(Adapter{down.contiguous().to(device), up.contiguous().to(device), scale}, module));
      if (!fresh) {
        throw Error(ErrorKind::kFormat, name + ": LoRA modules '" + at_->second.second + "' and '" + module +
                                            "' both adapt '" + t.weight +
                                            "' (two names for one layer): keep one of them");
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

  // Every module fitted its layer: bind them all at once (nothing changes when anything above
  // threw).
  declare_adapters(w, [&](const std::string& weight, Adapter& slot) {
    auto it = bound.find(weight);
    slot = it == bound.end() ? Adapter{} : it->second.first;
    if (it != bound.end()) sum.layers.push_back(weight);
  });
  return sum;
}

void detach_lora(DitWeights& w) {
  declare_adapters(w, [](const std::string&, Adapter& slot) { slot = Adapter{}; });
}

}  // namespace h3::dit
