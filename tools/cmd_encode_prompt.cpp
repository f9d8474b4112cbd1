// `h3 encode-prompt`: a prompt through a model folder's tokenizer/ and text_encoder/ into the
// embeddings file the engine reads (`embeds` [L, width], `tags` [L]), or only its token ids.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "dist/group.h"
#include "dist/world.h"
#include "engine/model/model.h"
#include "engine/planning/plan.h"
#include "engine/stages/reference_vision.h"
#include "h3/error.h"
#include "h3/limits.h"
#include "h3/model_clock.h"
#include "image/keyframes.h"
#include "io/safetensors.h"
#include "pictures/picture_file.h"
#include "text/prompt_encoder.h"
#include "text/vision_prompt.h"
#include "text/vision_tower.h"
#include "tools/command.h"

namespace h3::tools {
namespace {

std::string read_prompt_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kNotFound, path + ": cannot read the prompt file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();  // the raw bytes: nothing trimmed, control characters kept
}

// FL2VA's presentation, as the engine builds it for the same request: the pictures decoded by
// GStreamer, put onto the canvas the request's plan gives, seen by the vision tower.
text::Conditioning encode_with_keyframes(const std::string& model, int64_t layer,
                                         const text::EncoderOptions& eo, const std::string& prompt,
                                         const std::optional<std::string>& first,
                                         const std::optional<std::string>& last, int64_t width,
                                         int64_t height, int64_t* k) {
  GenerationRequest r;
  r.prompt = prompt;
  r.width = width;
  r.height = height;
  const ModelInfo m = read_model(model);
  TaskAsk ask;
  ask.first_frame = first.has_value();
  ask.last_frame = last.has_value();
  check_task(m, ask);  // a model without the condition path refuses before a picture is decoded
  if (first) r.first_frame = pictures::read_picture(*first, "--first-frame");
  if (last) r.last_frame = pictures::read_picture(*last, "--last-frame");
  const ClipPlan p = make_plan(m, r);  // the canvas, and the pictures checked
  std::vector<image::Rgb8> given;
  for (Keyframe a : p.keyframe_anchors) {
    const Picture& pic = a == Keyframe::kFirst ? r.first_frame : r.last_frame;
    given.push_back({pic.width, pic.height, pic.rgb});
  }
  const auto pe = text::PromptEncoder::load(model, layer, nullptr, eo);
  const auto tower = text::VisionTower::load(text::text_encoder_dir_of(model), nullptr, pe.options());
  std::vector<text::VisionFeatures> features;
  std::vector<std::array<int64_t, 3>> grids;
  for (image::Rgb8& pic : image::onto_canvas(given, p.canvas_width, p.canvas_height)) {
    const auto pixels = at::from_blob(pic.rgb.data(), {p.canvas_height, p.canvas_width, 3}, at::kByte);
    const text::VisionInputs in = tower.preprocess(pixels);
    features.push_back(tower.forward(in));
    grids.push_back(in.grid_thw);
  }
  *k = pe.encoder().layer();
  return text::encode_with_images(
      pe.encoder(), text::present_images(pe.tokenizer(), prompt, tower.config(), grids), features);
}

// Ref2VA's presentation, as the engine builds it for the same request (frames, canvas and
// references): each reference decoded by GStreamer, sized by the request's plan, seen by the
// vision tower; sound labelled only.
text::Conditioning encode_with_references(const std::string& model, int64_t layer,
                                          const text::EncoderOptions& eo, const std::string& prompt,
                                          const std::vector<std::string>& files, int64_t width,
                                          int64_t height, int64_t frames, int64_t* k) {
  GenerationRequest r;
  r.prompt = prompt;
  r.width = width;
  r.height = height;
  r.num_frames = frames;
  const ModelInfo m = read_model(model, /*ref2va=*/true);
  TaskAsk ask;
  ask.references = true;
  check_task(m, ask);  // before any reference is decoded
  const double seconds = dit::reference_read_seconds(frames > 0 ? frames : m.defaults.num_frames);
  for (size_t i = 0; i < files.size(); ++i) {
    r.references.push_back(
        pictures::read_reference(files[i], "--reference " + std::to_string(i + 1), seconds));
  }
  const ClipPlan p = make_plan(m, r);  // the references' sizes, frames and sound, checked
  const auto pe = text::PromptEncoder::load(model, layer, nullptr, eo);
  const auto tower = text::VisionTower::load(text::text_encoder_dir_of(model), nullptr, pe.options());
  std::vector<text::VisionFeatures> features;
  std::vector<text::PresentedReference> shown;
  for (const at::Tensor& pixels : reference_pixels(r.references, p.references)) {
    if (!pixels.defined()) continue;
    shown.emplace_back();
    features.push_back(tower.forward(reference_vision_inputs(tower, pixels, &shown.back())));
  }
  *k = pe.encoder().layer();
  return text::encode_with_images(pe.encoder(),
                                  text::present_references(pe.tokenizer(), prompt, tower.config(),
                                                           presentation_order(p.references, shown)),
                                  features);
}

int run(Args& a) {
  const std::string model = a.string("model");
  const auto prompt_arg = a.opt_string("prompt");
  const auto prompt_file = a.opt_string("prompt-file");
  const auto out = a.opt_string("out");
  const bool ids_only = a.flag("ids-only");
  const int64_t layer = a.int_or("layer", 0, 1, 1 << 20);
  const int ranks = static_cast<int>(a.int_or("ranks", 1, 1, 64));
  const std::string device = a.string_or("device", "cpu");
  const auto first_frame = a.opt_string("first-frame");
  const auto last_frame = a.opt_string("last-frame");
  const std::vector<std::string> references = a.strings("reference");
  const int64_t width = a.int_or("width", 0, 0, kMaxSide), height = a.int_or("height", 0, 0, kMaxSide);
  const int64_t frames = a.int_or("frames", 0, 0, kMaxFrames);
  a.finish();
  if (!a.positional().empty()) throw UsageError{"unexpected argument '" + a.positional().front() + "'"};
  if (prompt_arg.has_value() == prompt_file.has_value())
    throw UsageError{"give one of --prompt and --prompt-file"};
  if (out.has_value() == ids_only) throw UsageError{"give one of --out FILE and --ids-only"};
  if (device != "cpu" && device != "cuda") throw UsageError{"--device must be cpu or cuda"};
  const std::string prompt = prompt_arg ? *prompt_arg : read_prompt_file(*prompt_file);
  const std::string origin = prompt_file ? "prompt file " + *prompt_file : "--prompt";
  const bool pictures = first_frame || last_frame;
  if ((pictures || !references.empty()) && (ids_only || ranks != 1)) {
    throw UsageError{"--first-frame / --last-frame / --reference: encode with --ranks 1 and --out FILE"};
  }
  if (pictures && !references.empty()) {
    throw UsageError{
        "--reference (Ref2VA) and --first-frame / --last-frame (FL2VA) are different tasks: give one"};
  }

  if (ids_only) {
    const auto ids = text::Tokenizer::load(text::tokenizer_dir_of(model)).encode(prompt, origin);
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
    return 0;
  }

  text::EncoderOptions eo;
  eo.device = c10::Device(device == "cuda" ? c10::kCUDA : c10::kCPU);
  const auto start = std::chrono::steady_clock::now();
  text::Conditioning c;
  int64_t k = 0;
  if (!references.empty()) {
    c = encode_with_references(model, layer, eo, prompt, references, width, height, frames, &k);
  } else if (pictures) {
    c = encode_with_keyframes(model, layer, eo, prompt, first_frame, last_frame, width, height, &k);
  } else if (ranks == 1) {
    const auto pe = text::PromptEncoder::load(model, layer, nullptr, eo);
    k = pe.encoder().layer();
    c = pe.encoder().encode(pe.tokenizer().encode(prompt, origin));
  } else {
    const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks);
    dist::WorldOptions wo;
    wo.backend = device == "cuda" ? dist::Backend::kNccl : dist::Backend::kGloo;
    auto results = dist::run_threads(
        ranks,
        [&](dist::Group& g) {
          at::set_num_threads(threads);
          const auto pe = text::PromptEncoder::load(model, layer, &g, eo);
          auto r = pe.encode_on_ranks(g, g.rank() == 0 ? prompt : std::string());
          if (g.rank() == 0) {
            c = r;
            k = pe.encoder().layer();
          }
        },
        wo);
    dist::rethrow_first_failure(results);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  io::write_safetensors(*out, {{"embeds", c.embeds}, {"tags", c.tags}},
                        {{"text_encoder_layer", std::to_string(k)}});
  std::printf("embeds [%lld, %lld] (hidden_states[%lld]), tags [%lld] -> %s (%d rank%s, %.2f s)\n",
              (long long)c.embeds.size(0), (long long)c.embeds.size(1), (long long)k,
              (long long)c.tags.size(0), out->c_str(), ranks, ranks == 1 ? "" : "s", secs);
  return 0;
}

H3_REGISTER_COMMAND(
    "encode-prompt", "a prompt through the model's tokenizer and Qwen3-VL text encoder",
    "usage: h3 encode-prompt --model DIR (--prompt TEXT | --prompt-file FILE)\n"
    "                        (--out FILE | --ids-only) [--layer K] [--ranks N] [--device cpu|cuda]\n"
    "                        [--first-frame PICTURE] [--last-frame PICTURE] [--width W --height H]\n"
    "                        [--reference FILE ... [--frames F]]\n"
    "\n"
    "Tokenizes the prompt verbatim with DIR/tokenizer (no chat template, no special tokens\n"
    "added) and runs DIR/text_encoder's first K decoder layers: the DiT's conditioning,\n"
    "hidden_states[K]. DIR needs only tokenizer/ and text_encoder/ (only tokenizer/ for\n"
    "--ids-only).\n"
    "\n"
    "  --model DIR         a model folder (the release's, or one with tokenizer/ + text_encoder/)\n"
    "  --prompt TEXT       the prompt\n"
    "  --prompt-file FILE  the prompt as the file's raw bytes (UTF-8; nothing trimmed)\n"
    "  --out FILE          safetensors written with embeds [L, width] (fp32 on the CPU, bf16 on\n"
    "                      CUDA) and tags [L] (int64, 1 = text): what `h3 generate --embeds`\n"
    "                      and the element's prompt-embeds read\n"
    "  --ids-only          print the token ids, space-separated, instead of encoding\n"
    "  --layer K           conditioning layer (default: text_encoder_layer of DIR/model_index.json,\n"
    "                      else 50, the release's); must be below the encoder's layer count\n"
    "  --ranks N           tensor-parallel ranks, as threads of this process (default 1)\n"
    "  --device D          cpu (default) or cuda (bf16 weights; with --ranks, NCCL)\n"
    "  --first-frame PICTURE --last-frame PICTURE  FL2VA: the presentation with the keyframes, as\n"
    "                      `h3 generate` with the same pictures and size shows it (the canvas of the\n"
    "                      request's plan; DIR must then be a whole model folder with a vision tower);\n"
    "                      tags are 0 for the vision blocks. --ranks 1 only\n"
    "  --reference FILE    Ref2VA (repeatable, in order): the presentation with the references'\n"
    "                      labels and vision blocks, as `h3 generate` with the same references, size\n"
    "                      and --frames F shows it (DIR must have Ref2VA's DiT, which sizes them, and\n"
    "                      a vision tower). --ranks 1 only",
    run);

}  // namespace
}  // namespace h3::tools
