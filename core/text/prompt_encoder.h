// A model folder's own prompt path (docs/h3-model.md §3): tokenizer/ (the H3 tokenizer) and
// text_encoder/ (Qwen3-VL) turn a prompt into the DiT's conditioning, hidden_states[K] of the
// verbatim prompt with every row tagged text. K is the pipeline's `text_encoder_layer`
// (model_index.json), 50 for the release.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/conditioning.h"
#include "text/text_encoder.h"
#include "text/tokenizer.h"

namespace h3::dist {
class Group;
}

namespace h3::text {

// Whether `model_dir` holds the Qwen3-VL prompt path: text_encoder/config.json of a Qwen3-VL model
// and a tokenizer/ folder.
bool has_prompt_encoder(const std::string& model_dir);
// Whether `model_dir`/tokenizer exists (enough for ids alone).
std::string tokenizer_dir_of(const std::string& model_dir);
std::string text_encoder_dir_of(const std::string& model_dir);
// Throws h3::Error(kFormat) naming `text_encoder_dir`/config.json when it declares H3ByteEncoder:
// the byte-table encoder of older tiny models, no longer read (a Qwen3-VL encoder or precomputed
// embeddings condition every model now; the message says how to get either).
void refuse_byte_encoder(const std::string& text_encoder_dir);

class PromptEncoder {
 public:
  // `layer` 0 takes K from the folder's pipeline config (conditioning_layer_of). With a group of
  // several ranks each loads its shards of the encoder; every rank must then call encode().
  static PromptEncoder load(const std::string& model_dir, int64_t layer = 0, dist::Group* group = nullptr,
                            const EncoderOptions& opts = {});

  const Tokenizer& tokenizer() const { return tokenizer_; }
  const TextEncoder& encoder() const { return encoder_; }
  TextEncoder& encoder() { return encoder_; }
  // What the encoder was loaded with (its device and dtype): the vision tower runs alike.
  const EncoderOptions& options() const { return options_; }

  // Tokenizes and encodes on this rank (a group's ranks all call it with the same prompt).
  Conditioning encode(const std::string& prompt) const;

  // On a group: the prompt as rank 0 holds it is tokenized there (a bad prompt fails every rank
  // alike), the ids are broadcast, and every rank runs its shard of the encoder. Every rank
  // returns the conditioning. Call on every rank at the same point.
  Conditioning encode_on_ranks(dist::Group& g, const std::string& prompt_on_root) const;

  // The encoder's weights can be dropped between prompts (EngineOptions::free_text_encoder): the
  // release's 50 layers are tens of GB the DiT could use. The tokenizer stays (it is small and
  // slow to build). reload_weights() reads this rank's shards again from the same folder, with
  // the same K and options; with a group every rank calls it at the same point.
  void release_weights() { encoder_.release(); }
  bool weights_released() const { return encoder_.released(); }
  void reload_weights(dist::Group* group);
  // The encoder runs on `group` from now on (TextEncoder::use_group).
  void use_group(dist::Group* group) { encoder_.use_group(group); }

 private:
  PromptEncoder(Tokenizer t, TextEncoder e, EncoderOptions o)
      : tokenizer_(std::move(t)), encoder_(std::move(e)), options_(o) {}
  Tokenizer tokenizer_;
  TextEncoder encoder_;
  EncoderOptions options_;  // what the encoder was loaded with, for reload_weights()
};

}  // namespace h3::text
