#include "dit/weights.h"

#include <ATen/ATen.h>

#include "common/error.h"
#include "common/shape.h"

namespace h3::dit {
namespace {

template <typename Fn>
void for_each_tensor(const DitWeights& w, Fn fn) {
  auto lin = [&](const std::string& n, const LinearWeights& l) {
    fn(n + ".weight", l.weight);
    if (l.bias.defined()) fn(n + ".bias", l.bias);
  };
  auto block = [&](const std::string& p, const BlockWeights& b) {
    fn(p + "norm1.weight", b.norm1);
    fn(p + "attn.to_q.weight", b.to_q);
    fn(p + "attn.to_k.weight", b.to_k);
    fn(p + "attn.to_v.weight", b.to_v);
    fn(p + "attn.norm_q.weight", b.norm_q);
    fn(p + "attn.norm_k.weight", b.norm_k);
    fn(p + "attn.to_out.0.weight", b.to_out);
    fn(p + "norm2.weight", b.norm2);
    fn(p + "ff.net.0.proj.weight", b.ff_in);
    fn(p + "ff.net.2.weight", b.ff_out);
    if (b.adaln.weight.defined()) lin(p + "adaln_proj.linear", b.adaln);
  };
  lin("proj_in", w.proj_in);
  lin("audio_proj_in", w.audio_proj_in);
  lin("context_embedder", w.context_embedder);
  lin("time_embedder.linear_1", w.time_linear_1);
  lin("time_embedder.linear_2", w.time_linear_2);
  for (size_t i = 0; i < w.refiner.size(); ++i)
    block("token_refiner.refiner_blocks." + std::to_string(i) + ".", w.refiner[i]);
  fn("token_refiner.final_norm.weight", w.refiner_norm);
  for (size_t i = 0; i < w.blocks.size(); ++i)
    block("transformer_blocks." + std::to_string(i) + ".", w.blocks[i]);
  fn("norm_out.norm.weight", w.norm_out);
  lin("norm_out.linear", w.norm_out_linear);
  lin("proj_out", w.proj_out);
  lin("audio_proj_out", w.audio_proj_out);
}

const at::Tensor& get_weight_of(const DitWeights& w, const std::string& bias_name) {
  const std::string want = bias_name.substr(0, bias_name.size() - 5) + ".weight";
  const at::Tensor* found = nullptr;
  for_each_tensor(w, [&](const std::string& n, const at::Tensor& t) {
    if (n == want) found = &t;
  });
  return *found;
}

}  // namespace

DitWeights DitWeights::bind(const DitConfig& c, int tp,
                            const std::function<at::Tensor(const std::string&)>& get) {
  auto lin = [&](const std::string& n, bool bias = true) {
    LinearWeights l;
    l.weight = get(n + ".weight");
    if (bias) l.bias = get(n + ".bias");
    return l;
  };
  auto block = [&](const std::string& p, bool adaln) {
    BlockWeights b;
    b.norm1 = get(p + "norm1.weight");
    b.to_q = get(p + "attn.to_q.weight");
    b.to_k = get(p + "attn.to_k.weight");
    b.to_v = get(p + "attn.to_v.weight");
    b.norm_q = get(p + "attn.norm_q.weight");
    b.norm_k = get(p + "attn.norm_k.weight");
    b.to_out = get(p + "attn.to_out.0.weight");
    b.norm2 = get(p + "norm2.weight");
    b.ff_in = get(p + "ff.net.0.proj.weight");
    b.ff_out = get(p + "ff.net.2.weight");
    if (adaln) b.adaln = lin(p + "adaln_proj.linear");
    return b;
  };
  DitWeights w;
  w.proj_in = lin("proj_in");
  w.audio_proj_in = lin("audio_proj_in");
  w.context_embedder = lin("context_embedder");
  w.time_linear_1 = lin("time_embedder.linear_1");
  w.time_linear_2 = lin("time_embedder.linear_2");
  for (int64_t i = 0; i < c.num_refiner_layers; ++i) {
    w.refiner.push_back(block("token_refiner.refiner_blocks." + std::to_string(i) + ".", false));
  }
  w.refiner_norm = get("token_refiner.final_norm.weight");
  for (int64_t i = 0; i < c.num_layers; ++i)
    w.blocks.push_back(block("transformer_blocks." + std::to_string(i) + ".", true));
  w.norm_out = get("norm_out.norm.weight");
  w.norm_out_linear = lin("norm_out.linear");
  w.proj_out = lin("proj_out");
  w.audio_proj_out = lin("audio_proj_out");

  // Expected local shapes: the split tensors divided by tp along their split dimension.
  const int64_t h = c.hidden_size, inner = c.inner_dim() / tp, ffn = c.ffn_dim / tp;
  auto expect = [&](const std::string& name, const at::Tensor& t, std::vector<int64_t> shape) {
    if (!t.defined() || t.sizes() != at::IntArrayRef(shape)) {
      throw Error(ErrorKind::kMismatch,
                  "tensor '" + name + "' has shape " +
                      (t.defined() ? shape_string(t.sizes()) : std::string("(none)")) + " but the config" +
                      (tp > 1 ? " at tp " + std::to_string(tp) : "") + " needs " + shape_string(shape) +
                      ": the checkpoint does not match its config.json");
    }
  };
  for_each_tensor(w, [&](const std::string& name, const at::Tensor& t) {
    auto ends = [&](const std::string& s) {
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (ends("to_q.weight") || ends("to_k.weight") || ends("to_v.weight")) return expect(name, t, {inner, h});
    if (ends("to_out.0.weight")) return expect(name, t, {h, inner});
    if (ends("ff.net.0.proj.weight")) return expect(name, t, {2 * ffn, h});
    if (ends("ff.net.2.weight")) return expect(name, t, {h, ffn});
    if (ends("norm_q.weight") || ends("norm_k.weight")) return expect(name, t, {c.head_dim});
    if (ends("adaln_proj.linear.weight")) return expect(name, t, {c.adaln_width() / tp, c.time_embed_dim});
    if (ends("adaln_proj.linear.bias")) return expect(name, t, {c.adaln_width() / tp});
    if (ends("norm1.weight") || ends("norm2.weight") || ends("final_norm.weight") ||
        name == "norm_out.norm.weight") {
      return expect(name, t, {h});
    }
  });
  for (const auto& [name, t] : w.named()) {  // every bias matches its weight's output rows
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      const auto& weight = get_weight_of(w, name);
      expect(name, t, {weight.size(0)});
    }
  }
  expect("proj_in.weight", w.proj_in.weight, {h, c.video_row_width()});
  expect("audio_proj_in.weight", w.audio_proj_in.weight, {h, c.audio_in_channels});
  expect("context_embedder.weight", w.context_embedder.weight, {h, c.text_dim});
  expect("time_embedder.linear_1.weight", w.time_linear_1.weight, {c.time_embed_hidden_dim, c.freq_dim});
  expect("time_embedder.linear_2.weight", w.time_linear_2.weight,
         {c.time_embed_dim, c.time_embed_hidden_dim});
  expect("norm_out.linear.weight", w.norm_out_linear.weight, {c.final_adaln_width(), c.time_embed_dim});
  expect("proj_out.weight", w.proj_out.weight, {c.video_row_width(), h});
  expect("audio_proj_out.weight", w.audio_proj_out.weight, {c.audio_in_channels, h});
  return w;
}

std::vector<std::pair<std::string, at::Tensor>> DitWeights::named() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for_each_tensor(*this, [&](const std::string& n, const at::Tensor& t) { out.emplace_back(n, t); });
  return out;
}

}  // namespace h3::dit
