// The H3 video VAE decode: normalised DiT latents [1, 24, T, h, w] to RGB frames,
// streamed chunk by chunk (docs/h3-model.md §7, §8).
//
// One loop serves both entry points: decode_chunks() hands each temporal chunk
// to a ChunkSink as soon as its clip is decoded, and decode() is that same loop
// with a sink that concatenates, so the two cannot drift apart.
//
// Multi-rank: every rank of the group calls the same entry point with the same
// latents. Per clip, rank r decodes spatial tiles r, r+P, ... and the tiles are
// gathered (variable shapes); when a clip has fewer tiles than ranks, every rank
// decodes all tiles itself (decided from the latent shape, so all agree). Then
// every rank stitches, blends and makes pixels for its own band of rows, and the
// uint8 bands are gathered: rank 0 only joins them and owns the sink. Memory stays
// flat in the clip length: between clips only the 5-frame temporal overlap (of a
// band) is kept, and a chunk is dropped once the sink returns.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vae/chunk_plan.h"
#include "vae/chunk_sink.h"
#include "vae/config.h"
#include "vae/latent_source.h"
#include "vae/tiling.h"
#include "vae/vit_decoder.h"

namespace h3::dist {
class Group;
}

namespace h3::vae {

// The temporal constants of a decoder config, as the chunk planner takes them.
TemporalParams temporal_params(const VaeConfig& c);

struct DecodeOptions {
  std::optional<bool> tiling;  // spatial tiling; default: the config's (on in the release)
  int64_t height = 0;          // output crop (top-left); 0 = the decoded height (16 h)
  int64_t width = 0;           // 0 = the decoded width (16 w)
  bool float_frames = false;   // also deliver Chunk::frames_f32
};

// What one rank did; returned on every rank.
struct DecodeReport {
  int64_t clips = 0;  // temporal clips decoded
  int64_t tiles_per_clip = 0;
  int64_t tiles_decoded = 0;      // decoder calls run by this rank
  bool rank_local_tiles = false;  // fewer tiles than ranks: each rank decoded every tile
  int64_t chunks_delivered = 0;   // chunks the sink accepted (owner only)
  int64_t frames_delivered = 0;
};

// The whole clip on rank 0; empty tensors on peers.
struct DecodedVideo {
  at::Tensor frames;      // uint8 [T, H, W, 3]
  at::Tensor frames_f32;  // fp32 [T, H, W, 3] in [0, 1] (when float_frames was asked for)
  std::vector<int64_t> chunk_frames;
  DecodeReport report;
};

class VideoDecoder {
 public:
  VideoDecoder(VaeConfig config, DecoderWeights weights);

  // Loads a VAE folder, diffusers (vae/) or native (video_vae/), through h3::io::Weights:
  // native tensors are converted to diffusers names; tensors decode does not use are skipped.
  static VideoDecoder load(const std::string& vae_dir);

  // The same decoder with its weights on `device` (a CUDA device for the GPU decode). Latents
  // may live anywhere; frames reach the sink on the CPU whatever the device.
  VideoDecoder to(const c10::Device& device) const;
  c10::Device device() const { return weights_.proj_in_weight.device(); }

  const VaeConfig& config() const { return config_; }
  const DecoderWeights& weights() const { return weights_; }

  // The temporal plan for a latent of `latent_frames` frames (throws when too short).
  ChunkPlan plan(int64_t latent_frames) const;

  // Streams the chunks to `sink`, which rank 0 supplies and peers pass as nullptr.
  // Collective over `g`. Errors: see chunk_sink.h; a rank's own failure reaches its
  // caller as is and its peers as h3::Error(kDistributed, "rank R failed: ...").
  DecodeReport decode_chunks(const at::Tensor& latents, ChunkSink* sink, dist::Group& g,
                             const DecodeOptions& opts = {}) const;
  DecodeReport decode_chunks(const at::Tensor& latents, ChunkSink& sink,
                             const DecodeOptions& opts = {}) const;
  // The same loop over latents a source makes as the clips need them (latent_source.h): a
  // clip is decoded, and its chunks delivered, as soon as its latents exist.
  DecodeReport decode_chunks(LatentSource& latents, ChunkSink* sink, dist::Group& g,
                             const DecodeOptions& opts = {}) const;

  // The whole clip: decode_chunks with a concatenating sink on rank 0.
  DecodedVideo decode(const at::Tensor& latents, dist::Group& g, const DecodeOptions& opts = {}) const;
  DecodedVideo decode(const at::Tensor& latents, const DecodeOptions& opts = {}) const;

 private:
  VaeConfig config_;
  DecoderWeights weights_;
};

}  // namespace h3::vae
