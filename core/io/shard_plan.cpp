#include "io/shard_plan.h"

#include "h3/error.h"

namespace h3::io {

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
