// LoRA adapters for the DiT from a PEFT file (docs/causal.md "LoRA"): `<prefix><module>.lora_A
// .weight` [r, in] and `.lora_B.weight` [out, r], the module named as the release's native /
// ComfyUI model names it (RAVEN-Streaming's and the official step-distilled adapters) or by
// its diffusers name. Each is bound, as this rank's shard, to the adapter slot of the diffusers
// layer it adapts (dit/weights.h declare_adapters): a native fused qkv_proj's B splits into
// its [Q; K; V] row blocks over to_q / to_k / to_v with A shared, a native fc1's B [gate; up]
// is swapped to diffusers' [up; gate]. Under tensor parallelism a column-parallel layer takes
// its rows of B (per half for the gated FFN) and A whole, a row-parallel one its columns of A
// and B whole, so the residual joins each rank's partial output before the all-reduce; the
// LoRA rank itself is never split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dit/config.h"
#include "dit/weights.h"

namespace h3::dit {

struct LoraSummary {
  std::string file;            // the safetensors file read
  int64_t modules = 0;         // modules of the file (a fused qkv counts once)
  int64_t adapted_layers = 0;  // diffusers layers it adapts (a fused qkv counts three)
  int64_t rank = 0;            // the largest r
  double alpha = 0.0;          // the alpha of the first module (per module they may differ)
  // Where that alpha came from: "tensor", "lora_adapter_metadata", "metadata",
  // "adapter_config.json" (either config's with " alpha_pattern '<key>'" when a pattern gave it)
  // or "none (alpha = r)".
  std::string alpha_source;
  std::vector<std::string> layers;  // the adapted diffusers weight names, in declaration order
};

// Reads `path` (a .safetensors file, or a folder holding adapter_model.safetensors and maybe
// adapter_config.json) and binds every module's adapter onto `w` as rank `tp_rank` of
// `tp_size` holds it. alpha per module, the first of: a `<module>.alpha` tensor; the file's
// own settings (diffusers' `lora_adapter_metadata`: its alpha_pattern, then lora_alpha; then
// a plain `lora_alpha` / `alpha` metadata value); adapter_config.json beside it (alpha_pattern,
// then lora_alpha); r. alpha_pattern and rank_pattern match as PEFT matches them (the first key,
// in the config's order, whose regular expression matches the whole module name as
// (.*\.)?(key)). The scale is alpha / r, or alpha / sqrt(r) with use_rslora.
// Throws h3::Error naming the file and module (and tensor, key or setting): kNotFound (no
// file), kFormat (not a safetensors file, or a damaged one: empty, truncated; a key that is not
// a LoRA tensor of a DiT module; a module's tensor given twice; a module without its A or B; a
// non-2-D or non-finite tensor; ranks of A and B that differ, or that differ from the config's
// r / rank_pattern; rank 0; an alpha that is not one positive number; a layer adapted by two
// modules; bad settings), kMismatch (shapes or layers that do not fit the model, a layer `w`
// has no adapter slot for). `w` is left unchanged when it throws.
LoraSummary attach_lora(DitWeights& w, const DitConfig& c, const std::string& path, int tp_rank = 0,
                        int tp_size = 1);

// Removes every adapter.
void detach_lora(DitWeights& w);

}  // namespace h3::dit
