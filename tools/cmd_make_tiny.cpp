// `h3 make-tiny`: writes the embedded default model (tools/tiny_model.h).
#include <cstdio>
#include <limits>

#include "tools/command.h"
#include "tools/tiny_model.h"

namespace h3::tools {
namespace {

int run(Args& a) {
  const std::string out = a.string("out");
  const auto seed = static_cast<uint64_t>(
      a.int_or("seed", static_cast<int64_t>(kTinyDefaultSeed), 0, std::numeric_limits<int64_t>::max()));
  const std::string only = a.string_or("only", "");
  const std::string tokenizer = a.string_or("tokenizer", "");
  const bool quiet = a.flag("quiet");
  const bool conditioning = a.flag("conditioning");
  a.finish();
  if (!a.positional().empty()) throw UsageError{"unexpected argument '" + a.positional().front() + "'"};
  if (conditioning) {
    write_random_model(out, tiny_conditioning_spec(), seed, only, tokenizer);
  } else {
    write_tiny_model(out, seed, only, tokenizer);
  }
  if (!quiet) {
    std::fprintf(stderr, "h3 make-tiny: wrote %s%s%s (seed %llu)\n",
                 only.empty() ? "the tiny model" : only.c_str(), only.empty() ? " to " : " of ", out.c_str(),
                 static_cast<unsigned long long>(seed));
  }
  return 0;
}

H3_REGISTER_COMMAND(
    "make-tiny", "write the random tiny model of the tests (seeded random H3-architecture weights)",
    "usage: h3 make-tiny --out DIR [--seed S] [--only COMPONENT] [--tokenizer DIR] [--conditioning] "
    "[--quiet]\n"
    "\n"
    "Writes a complete tiny MiniMax-H3-architecture model in the release layout:\n"
    "model_index.json, transformer/ and vae/ (release config schemas, diffusers tensor\n"
    "names), audio_vae/ (the release's native layout: config.json, config.yaml,\n"
    "metadata.json, model.safetensors), text_encoder/ (a 3-layer Qwen3-VL-shaped text encoder, release "
    "layout;\n"
    "model_index.json sets text_encoder_layer 2), tokenizer/ (the release's tokenizer\n"
    "files, shipped in data/default/tokenizer), scheduler/ and audio_scheduler/. The same seed\n"
    "gives the same bytes. Its weights are random:\n"
    "it exercises the engine end to end; its video is structured noise (the embedded\n"
    "default, data/default, is its trained sibling: train/tiny).\n"
    "\n"
    "  --out DIR         the model folder to write (created)\n"
    "  --conditioning    with the condition paths: a small VAE encoder in vae/ and a vision\n"
    "                    tower in text_encoder/ (first-frame / last-frame), and Ref2VA's DiT in\n"
    "                    transformer_ref/ (reference); without it the model is T2VA only, as the\n"
    "                    tests' default tiny model\n"
    "  --seed S          weights seed (default 20260801, the tests' model's; the trained\n"
    "                    default keeps this seed's text encoder)\n"
    "  --only COMPONENT  write only model_index, transformer, vae, audio_vae, text_encoder,\n"
    "                    tokenizer, scheduler or audio_scheduler (the build makes each\n"
    "                    separately)\n"
    "  --tokenizer DIR   where to copy tokenizer/ from (default: the project's\n"
    "                    data/default/tokenizer, else the installed default model's)\n"
    "  --quiet           no summary line",
    run);

}  // namespace
}  // namespace h3::tools
