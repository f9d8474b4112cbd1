// Where the streaming decode takes its latents from, clip by clip: a whole latent tensor, or a
// generator that makes them as the decode asks (the chunk-causal sampler: docs/causal.md), so
// that the decode of the first clip starts as soon as its latents exist and the latents of
// the whole clip never need to exist at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace h3::vae {

class LatentSource {
 public:
  virtual ~LatentSource() = default;
  // [1, C, T, h, w]: the whole clip's latent shape, known before any is made.
  virtual std::vector<int64_t> shape() const = 0;
  // The latents at the time indices `t` (ascending, within [0, T)) as [1, C, n, h, w]. Every
  // rank calls it at the same point of the decode with the same indices (a generator may run
  // its collectives inside); no later call asks for an index below the smallest of `t`.
  virtual at::Tensor select(const std::vector<int64_t>& t) = 0;
};

// A latent tensor held whole.
class TensorLatents : public LatentSource {
 public:
  explicit TensorLatents(at::Tensor latents) : z_(std::move(latents)) {}
  ~TensorLatents() override;
  std::vector<int64_t> shape() const override { return z_.sizes().vec(); }
  at::Tensor select(const std::vector<int64_t>& t) override;

 private:
  at::Tensor z_;
};

}  // namespace h3::vae
