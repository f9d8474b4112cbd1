// Text conditioning for the DiT (docs/h3-model.md §3): the rows the transformer's context embedder
// takes, [L, text_dim], and their modality tags (1 text, 0 vision tokens).
//
// Two sources exist:
//  - a precomputed embeddings file (safetensors: `embeds` [L, text_dim] bf16/fp16/fp32 and an
//    optional integer `tags` [L]), which overrides a prompt (`h3 encode-prompt` writes one);
//  - the model folder's own tokenizer/ and Qwen3-VL text_encoder/ (prompt_encoder.h), as the
//    release and the tiny default model have them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace h3::text {

struct Conditioning {
  at::Tensor embeds;  // [L, text_dim] fp32, CPU, contiguous, L >= 1
  at::Tensor tags;    // [L] int64 (0 vision, 1 text), or undefined: every row is text
};

// Reads an embeddings file for a model whose transformer takes `text_dim`-wide rows.
// Throws h3::Error: kNotFound (no file), kFormat (no `embeds`, wrong rank, non-float, empty,
// bad `tags`), kMismatch (`embeds` width != text_dim), each naming the file and what to do.
Conditioning load_embeddings(const std::string& path, int64_t text_dim);

// Checks a conditioning already in memory (as load_embeddings does); `origin` names its source.
void check_conditioning(const Conditioning& c, int64_t text_dim, const std::string& origin);

}  // namespace h3::text
