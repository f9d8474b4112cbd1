// The Qwen3-VL language-model path H3 conditions on (docs/h3-model.md §2-3), for text-only prompts:
// embed_tokens, then decoder layers (pre-norm GQA attention with per-head q/k RMSNorm and
// interleaved mRoPE, causal; pre-norm SwiGLU), and the unnormalised hidden state after layer K-1
// (`hidden_states[K]`, K = 50 of 64 for the release). The vision tower, the layers >= K, the
// final norm and lm_head are never read from the checkpoint.
//
// Tensor parallel over a group of ranks: q/k/v/gate/up split by output rows (each rank holds
// whole query and key-value heads), o/down by input columns with one all_reduce each; norms and
// embed_tokens whole. Every shard is copied into storage of its own, so the mapped checkpoint
// can be closed after loading.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "text/conditioning.h"
#include "text/encoder_config.h"
#include "text/encoder_parameters.h"

namespace h3::dist {
class Group;
}

namespace h3::text {

struct EncoderOptions {
  c10::Device device = c10::Device(c10::kCPU);
  // The dtype weights are held and computed in: default bf16 on CUDA (as released), fp32 on CPU.
  std::optional<at::ScalarType> dtype;
};

// Visual rows of a multimodal prompt (Qwen3-VL's image presentation): the embeddings that replace
// those of the tokens at `mask` (in order), and the deepstack features added to the hidden states
// at the same rows after decoder layers 0, 1, ... (one per deepstack layer).
struct VisualRows {
  at::Tensor mask;                    // [L] bool: the <|image_pad|> rows
  at::Tensor embeds;                  // [mask.sum(), hidden]
  std::vector<at::Tensor> deepstack;  // each [mask.sum(), hidden]
};

class TextEncoder {
 public:
  // Loads embed_tokens and layers 0..layer-1 of `dir` (a text_encoder/ folder: config.json and a
  // checkpoint, sharded or not) for hidden_states[layer]; with a group of several ranks, this
  // rank's shards. Throws h3::Error: kInvalidArgument (layer not in 1..num_layers-1, or a group
  // size that cannot split the heads), kNotFound (a tensor missing from the checkpoint),
  // kMismatch (a tensor whose shape disagrees with config.json), naming the file and tensor.
  static TextEncoder load(const std::string& dir, int64_t layer, dist::Group* group = nullptr,
                          const EncoderOptions& opts = {});

  const EncoderConfig& config() const { return config_; }
  int64_t layer() const { return k_; }  // K
  int64_t width() const { return config_.hidden_size; }

  // hidden_states[K] for token ids [L] at mRoPE positions [3, L] (t, h, w; equal rows for text):
  // [L, hidden] in the compute dtype on the encoder's device. `all`, when given, receives
  // hidden_states[0..K] (0 = the embeddings). Every rank of the group calls it with the same
  // input. Throws kInvalidArgument for no ids or an id outside the vocabulary.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& positions,
                     std::vector<at::Tensor>* all = nullptr) const;
  // The same with visual rows (vision_prompt.h builds ids, positions and mask). `all` receives
  // the residual stream after each layer, deepstack features added (what the next layer reads;
  // transformers' output_hidden_states gives layers 0..n-1 before that addition). Throws
  // kInvalidArgument when the visual rows do not match the mask.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& positions, const VisualRows& visual,
                     std::vector<at::Tensor>* all = nullptr) const;
  // A text-only prompt: positions 0..L-1 on all three axes.
  at::Tensor forward(const std::vector<int64_t>& ids) const;
  // The DiT's conditioning: hidden_states[K] as fp32 CPU rows, every row tagged text (1).
  Conditioning encode(const std::vector<int64_t>& ids) const;

  // Runs on `group` from now on (a process world formed again: the same rank of the same size).
  // Throws h3::Error(kInternal) otherwise.
  void use_group(dist::Group* group);

  // This rank's tensors with their checkpoint names.
  std::vector<std::pair<std::string, at::Tensor>> named() const;
  // Drops the weights (an engine can free them after encoding); forward then throws.
  void release();
  bool released() const { return !weights_.embed_tokens.defined(); }
  const std::string& dir() const { return dir_; }

 private:
  at::Tensor run(const at::Tensor& ids, const at::Tensor& positions, const VisualRows* visual,
                 std::vector<at::Tensor>* all) const;

  EncoderConfig config_;
  EncoderWeights weights_;             // this rank's shards, bound by declare_encoder_parameters
  at::ScalarType dtype_ = at::kFloat;  // the compute dtype (embed_tokens may be stored narrower)
  int64_t k_ = 0;
  dist::Group* group_ = nullptr;
  int tp_rank_ = 0, tp_size_ = 1;
  std::string dir_;
};

// mRoPE angles for positions [3, L]: cos and sin [L, head_dim] (fp32) — frequency j takes its
// position from axis t, h or w as the (interleaved) sections assign it, and the angles repeat
// for the two rotate-half halves.
std::pair<at::Tensor, at::Tensor> mrope_cos_sin(const EncoderConfig& c, const at::Tensor& positions);

// Causal attention of q [L, heads, D] over k, v [L, kv_heads, D] (each key-value head serves
// heads / kv_heads query heads), scaled by 1/sqrt(D): [L, heads * D].
at::Tensor causal_gqa_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

}  // namespace h3::text
