#include "io/shard_plan.h"

#include "common/error.h"

namespace h3::io {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Split dit_split(const std::string& n) {
  for (const char* p : {".attn.to_q.", ".attn.to_k.", ".attn.to_v."}) {
    if (n.find(p) != std::string::npos) return Split::kColumn;  // weight, and a bias if there is one
  }
  if (n.find(".adaln_proj.linear.") != std::string::npos) return Split::kColumn;  // its bias too
  if (n.find(".ff.net.0.proj.") != std::string::npos) return Split::kFusedColumn;
  if (ends_with(n, ".attn.to_out.0.weight") || ends_with(n, ".ff.net.2.weight")) return Split::kRow;
  return Split::kReplicated;
}

void check_dit_tp(int tp, int64_t num_heads, int64_t ffn_dim, int64_t adaln_width) {
  if (tp < 1)
    throw Error(ErrorKind::kInvalidArgument, "tensor-parallel size " + std::to_string(tp) + " must be >= 1");
  auto need = [tp](int64_t v, const char* what) {
    if (v <= 0 || v % tp != 0) {
      throw Error(ErrorKind::kInvalidArgument, "tensor-parallel size " + std::to_string(tp) +
                                                   " does not divide the " + what + " (" + std::to_string(v) +
                                                   "); choose a tp that divides it");
    }
  };
  need(num_heads, "attention heads");
  need(ffn_dim, "FFN width");
  need(adaln_width, "AdaLN width");
}

}  // namespace h3::io
