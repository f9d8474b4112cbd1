#include "engine/stages/stage_conditioning.h"

#include <ATen/ATen.h>

#include <string>

#include "common/op_profile.h"
#include "dist/agree.h"
#include "h3/error.h"
#include "text/vision_prompt.h"

namespace h3::engine_detail {
namespace {

void check_one_source(const GenerationRequest& req) {
  if (!req.embeds_path.empty() && !req.prompt.empty()) {
    throw Error(ErrorKind::kInvalidArgument,
                "both a prompt and an embeddings file were given: give one (the embeddings file is the "
                "encoded prompt)");
  }
}

[[noreturn]] void throw_no_encoder(const ModelInfo& m) {
  throw Error(ErrorKind::kInvalidArgument,
              m.dir +
                  " has no text encoder of its own (text_encoder/ with a Qwen3-VL config and tokenizer/): a "
                  "prompt string cannot condition it. Supply precomputed prompt embeddings instead: a "
                  "safetensors file with `embeds` [L, " +
                  std::to_string(m.dit.text_dim) +
                  "] (the text encoder's hidden_states[50], bf16 or fp32) and optionally `tags` [L] "
                  "(h3 encode-prompt --model DIR --prompt TEXT --out FILE writes one from a folder holding "
                  "text_encoder/ and tokenizer/; h3 generate --embeds FILE; GenerationRequest::embeds_path)");
}

// Every rank whose shard was freed reads it again. Agreed on every rank each time, whether or not
// it reloads: ranks may differ (a worker process that joined after rank 0 freed its shard has its
// own loaded), and a rank that fails makes every rank fail together, leaving the encoder released
// for the next request to retry.
void ensure_text_encoder(const StageContext& c) {
  dist::LocalFailure f;
  try {
    if (c.parts.prompt->weights_released()) c.parts.prompt->reload_weights(&c.group);
  } catch (...) {
    f.capture();
  }
  dist::agree_or_throw(c.group, f);
}

// FL2VA: "<Picture i>: " and the vision block of each keyframe, then the prompt; Ref2VA: the
// references' labels and blocks (text/vision_prompt.h), then the prompt. Every rank has
// the job's prompt and the same grids, so each builds the same ids itself; a bad prompt fails
// every rank alike.
text::Conditioning encode_presentation(const StageContext& c, const text::PromptEncoder& encoder,
                                       const std::string& prompt, const KeyframeVision& k) {
  dist::LocalFailure f;
  text::VisionPrompt presented;
  try {
    // FL2VA's keyframes are pictures; Ref2VA's references pictures and videos, labelled per kind.
    presented =
        c.plan.references.empty()
            ? text::present_images(encoder.tokenizer(), prompt, c.parts.vision->config(), k.grids)
            : text::present_references(encoder.tokenizer(), prompt, c.parts.vision->config(), k.references);
  } catch (...) {
    f.capture();
  }
  dist::agree_or_throw(c.group, f);
  return text::encode_with_images(encoder.encoder(), presented, k.features);
}

}  // namespace

text::Conditioning condition(const ModelInfo& m, const GenerationRequest& req) {
  check_one_source(req);
  if (!req.embeds_path.empty()) return text::load_embeddings(req.embeds_path, m.dit.text_dim);
  throw_no_encoder(m);
}

void check_conditioning(const ModelInfo& m, const GenerationRequest& req) {
  // The encoder-less case first: a caller that gave only a prompt learns what to give instead.
  if (req.embeds_path.empty() && !m.prompt_encoder) throw_no_encoder(m);
  check_one_source(req);
  check_task(m, task_ask(req));
}

text::Conditioning conditioning_stage(const StageContext& c, const GenerationRequest& req,
                                      bool free_text_encoder, const KeyframeVision* keyframes) {
  const bool root = c.root();
  dist::LocalFailure f;
  text::Conditioning cond;
  if (root) c.post_progress(Phase::kConditioning, 0, c.plan.evaluations);
  if (c.parts.prompt && req.embeds_path.empty()) {
    // The model's own text encoder: rank 0 tokenizes, every rank runs its shard.
    text::PromptEncoder& encoder = *c.parts.prompt;
    ensure_text_encoder(c);
    const OpTimer timer(OpKind::kTextEncode);
    if (keyframes) {
      cond = encode_presentation(c, encoder, req.prompt, *keyframes);
    } else {
      cond = encoder.encode_on_ranks(c.group, root ? req.prompt : std::string());
    }
    if (free_text_encoder) encoder.release_weights();
  } else {
    if (root) {
      try {
        cond = condition(c.model, req);
      } catch (...) {
        f.capture();
      }
    }
    dist::agree_or_throw(c.group, f);
  }
  if (c.agreed_cancel()) throw Error(ErrorKind::kCancelled, "cancelled before denoising");
  dist::Group& g = c.group;
  const int64_t rows = g.broadcast_int(root ? cond.embeds.size(0) : 0, 0);
  const bool tags = g.broadcast_int(root && cond.tags.defined() ? 1 : 0, 0) != 0;
  if (!root) {
    cond.embeds = at::empty({rows, c.model.dit.text_dim}, at::kFloat);
    if (tags) cond.tags = at::empty({rows}, at::kLong);
  }
  g.broadcast(cond.embeds, 0);
  if (tags) g.broadcast(cond.tags, 0);
  return cond;
}

}  // namespace h3::engine_detail
