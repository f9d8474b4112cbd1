// Sample-rate conversion of a reference's sound onto the audio VAE's rate, as the reference
// pipelines do it (torchaudio's default Resample: a Hann-windowed sinc, 6 zero crossings each
// side, roll-off 0.99 of the lower Nyquist rate; kernels computed in fp64 and applied in fp32 as a
// strided convolution of the waveform padded with zeros).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace h3::audio {

// Samples a signal of `samples` samples at `from` Hz has at `to` Hz: ceil(samples · to / from)
// (the rates reduced by their gcd first).
int64_t resampled_length(int64_t samples, int64_t from, int64_t to);

// The elements of the kernels resampling from `from` to `to` Hz builds: one filter per output
// phase of the rates reduced by their gcd, (to / g) x (2 * width + from / g). Rates whose gcd is
// small make it large (44,101 Hz: 32,000 phases of 44,115 taps).
int64_t resample_kernel_elements(int64_t from, int64_t to);

// wave [C, N] floating -> [C, resampled_length(N, from, to)] fp32 CPU; the same tensor (as fp32)
// when from == to. Rates must be positive.
at::Tensor resample(const at::Tensor& wave, int64_t from, int64_t to);

}  // namespace h3::audio
