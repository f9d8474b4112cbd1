// `h3 plan`: the fit planner (engine/planning/fit_plan.h) on the command line. For a request and N ranks,
// what each rank's device holds in every legal TP x SP layout and whether it fits, before any
// machine is reserved or any weight downloaded: the configs are all it reads.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "dit/config.h"
#include "engine/model/model.h"
#include "engine/planning/fit_plan.h"
#include "engine/planning/memory_guard.h"
#include "engine/planning/plan.h"
#include "h3/error.h"
#include "h3/limits.h"
#include "tools/command.h"

namespace h3::tools {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// A plain number is GiB (80, 79.6); a size with a unit is what parse_bytes reads (80G, 81920M).
int64_t parse_device_memory(const std::string& text) {
  char* end = nullptr;
  const double gib = std::strtod(text.c_str(), &end);
  if (!text.empty() && *end == '\0') {
    if (!(gib > 0) || gib > 1024 * 1024) {
      throw Error(ErrorKind::kInvalidArgument,
                  "--device-memory " + text +
                      ": give the memory of one rank's device in GiB (e.g. 80), a positive size");
    }
    return static_cast<int64_t>(gib * kGiB);
  }
  return parse_bytes(text, "--device-memory");
}

int dtype_bytes(const std::string& dtype) {
  if (dtype == "bf16") return 2;
  if (dtype == "fp32") return 4;
  throw UsageError{"--dtype " + dtype + ": give bf16 (the release on GPUs) or fp32"};
}

bool on_off(const std::string& name, const std::string& v) {
  if (v == "on") return true;
  if (v == "off") return false;
  throw UsageError{"--" + name + " " + v + ": give on or off"};
}

std::string gib(int64_t bytes) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / kGiB);
  return buf;
}

void print_request(const ClipPlan& p, const PlanOptions& o) {
  std::printf("request: %lldx%lld, ", (long long)p.width, (long long)p.height);
  if (p.endless) {
    std::printf("endless");
  } else {
    std::printf("%lld frames (%lld generated, %lld latent frames, %lld audio latents)",
                (long long)p.num_frames, (long long)p.generated_frames, (long long)p.latent_frames,
                (long long)p.audio_latents);
  }
  if (p.sampler == Sampler::kCausal) {
    std::printf(", causal sampler: %lld steps per chunk, KV cache of %lld records\n", (long long)p.steps,
                (long long)p.cache_records);
  } else {
    std::printf(", euler sampler: %lld grid points (%lld evaluations)\n", (long long)p.steps,
                (long long)p.evaluations);
  }
  std::printf("%s weights and activations, AdaLN tables %s, %d ranks of %s each\n",
              o.dtype_bytes == 2 ? "bf16" : "fp32", o.adaln_tables ? "on" : "off", o.ranks,
              format_gib(o.device_memory).c_str());
}

void print_layouts(const std::vector<LayoutFit>& layouts) {
  std::printf("%-9s %9s %6s %8s %7s %8s %8s %8s %8s %8s %8s %8s  %s\n", "layout", "rows/rank", "heads",
              "weights", "tables", "latents", "activ.", "attn", "KV", "decode", "keyfr.", "total", "fits");
  for (const auto& f : layouts) {
    // The name has one two-byte character (×): pad by bytes accordingly.
    std::printf("%-10s %9lld %6lld %8s %7s %8s %8s %8s %8s %8s %8s %8s  %s\n", f.name().c_str(),
                (long long)f.rows_per_rank, (long long)f.heads_per_rank, gib(f.weights).c_str(),
                gib(f.tables).c_str(), gib(f.latents).c_str(), gib(f.activations).c_str(),
                gib(f.attention).c_str(), gib(f.kv_cache).c_str(), gib(f.decode).c_str(),
                gib(f.conditioning).c_str(), gib(f.total()).c_str(), f.fits() ? "yes" : "no");
  }
}

int run(Args& args) {
  const auto model_dir = args.opt_string("model");
  const auto config = args.opt_string("config");
  const auto ranks_text = args.string("ranks");
  const auto memory_text = args.string("device-memory");
  // Wide ranges here: the engine's own plan names a value outside its limits.
  constexpr int64_t kAny = int64_t{1} << 40;
  GenerationRequest req;
  req.width = args.int_or("width", 0, -kAny, kAny);
  req.height = args.int_or("height", 0, -kAny, kAny);
  req.num_frames = args.int_or("frames", 0, -kAny, kAny);
  req.steps = args.int_or("steps", 0, -kAny, kAny);
  const std::string sampler = args.string_or("sampler", to_string(Sampler::kEuler));
  req.sink = args.int_or("sink", kDefaultSink, -kAny, kAny);
  req.window = args.int_or("window", kDefaultWindow, -kAny, kAny);
  const int64_t keyframes = args.int_or("keyframes", 0, 0, 2);
  PlanOptions o;
  o.dtype_bytes = dtype_bytes(args.string_or("dtype", "bf16"));
  o.adaln_tables = on_off("adaln-tables", args.string_or("adaln-tables", "off"));
  args.finish();
  if (!args.positional().empty()) throw UsageError{"h3 plan takes no positional arguments"};
  if (model_dir.has_value() == config.has_value()) {
    throw UsageError{
        "give either --model DIR (a model folder) or --config CONFIG (a transformer config.json)"};
  }
  try {
    size_t used = 0;
    o.ranks = std::stoi(ranks_text, &used);
    if (used != ranks_text.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw UsageError{"--ranks " + ranks_text + ": give the number of ranks (GPUs), 1.." +
                     std::to_string(kMaxRanks)};
  }
  o.device_memory = parse_device_memory(memory_text);
  req.sampler = parse_sampler(sampler);

  const ModelInfo m = model_dir ? read_model(*model_dir) : model_of_config(dit::DitConfig::load(*config));
  ClipPlan p = make_plan(m, req);
  // FL2VA: a first frame (and a last one), on the plan's canvas.
  if (keyframes > 0 && p.sampler == Sampler::kCausal) {
    throw UsageError{
        "--keyframes: keyframes condition the euler sampler only (the causal sampler has no keyframe path)"};
  }
  if (keyframes >= 1) p.keyframe_anchors.push_back(Keyframe::kFirst);
  if (keyframes == 2) p.keyframe_anchors.push_back(Keyframe::kLast);
  const auto layouts = model_dir ? plan_layouts(m, p, o) : plan_layouts(m.dit, p, o);

  const dit::DitConfig& c = m.dit;
  std::printf("%s: %lld blocks, %lld heads x %lld, hidden %lld, FFN %lld\n",
              model_dir ? model_dir->c_str() : config->c_str(), (long long)c.num_layers,
              (long long)c.num_heads, (long long)c.head_dim, (long long)c.hidden_size, (long long)c.ffn_dim);
  print_request(p, o);
  std::printf("widest DiT forward: %lld rows (%lld reserved for the text)\n", (long long)layouts.front().rows,
              (long long)kTextRowsReserve);
  std::printf("per rank, GiB:\n");
  print_layouts(layouts);
  std::printf("%s\n", fit_summary(layouts).c_str());
  std::printf(
      "assumed: attention through the blocked kernel (fp32 score blocks of at most 4 Mi elements; a fused "
      "flash kernel holds less); SP ranks hold whole TP shards of the weights; the forward and the decode "
      "take turns (the larger counts)\n");
  std::printf(
      "not counted: the text encoder's shard (--free-text-encoder releases it after the prompt), the VAE's "
      "weights, the CUDA context and NCCL's buffers%s\n",
      model_dir ? ""
                : ", the video decode (--config gives a transformer config only; --model DIR counts it)");
  for (const auto& f : layouts) {
    if (f.fits()) return 0;
  }
  return 1;
}

H3_REGISTER_COMMAND(
    "plan", "which TP x SP layouts of N ranks fit a request in each device's memory",
    "usage: h3 plan (--model DIR | --config CONFIG.json) --ranks N --device-memory GIB\n"
    "               [--width W] [--height H] [--frames F] [--steps N] [--sampler euler|causal]\n"
    "               [--sink N] [--window N] [--dtype bf16|fp32] [--adaln-tables on|off] [--keyframes K]\n"
    "\n"
    "For every legal layout of N ranks (tp x sp = N; tp divides the heads, the FFN and the\n"
    "AdaLN width; sp divides the heads of each TP rank), what one rank's device holds at the\n"
    "request's peak (weights, AdaLN tables, latents, activations, attention, KV cache, video\n"
    "decode) and whether it fits; then the layouts that fit, or the smallest device memory\n"
    "that would. Reads the configs only. Exit code 0 when a layout fits, 1 when none does.\n"
    "\n"
    "  --model DIR            a model folder (model_index.json, transformer/, vae/): counts the\n"
    "                         video decode too\n"
    "  --config CONFIG.json   a transformer config.json alone (no VAE: the decode is not counted)\n"
    "  --ranks N              ranks (GPUs), 1..64\n"
    "  --device-memory GIB    one rank's device memory in GiB (80), or a size (80G, 81920M)\n"
    "  --width, --height      pixels (default: the model's; the release 1344x768)\n"
    "  --frames F             frames (default: the model's; the release 124); -1: endless\n"
    "                         (causal)\n"
    "  --steps N              grid points (euler; default the model's, 50) or forwards per\n"
    "                         chunk (causal; default 4)\n"
    "  --sampler S            euler (default) or causal\n"
    "  --keyframes K          FL2VA: 1 (a first frame) or 2 (first and last); with --model, the column\n"
    "                         keyfr. counts the VAE encoder's and the vision tower's weights, whole on\n"
    "                         every rank, and their larger activation on a keyframe (default 0)\n"
    "  --sink N, --window N   causal: KV-cache records pinned and recent chunks kept (2, 2)\n"
    "  --dtype D              bf16 (default; the release on GPUs) or fp32\n"
    "  --adaln-tables on|off  AdaLN tables in place of the AdaLN projections (default off)",
    run);

}  // namespace
}  // namespace h3::tools
