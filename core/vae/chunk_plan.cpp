#include "vae/chunk_plan.h"

#include <algorithm>
#include <string>

#include "h3/error.h"

namespace h3::vae {
namespace {

int64_t pos_mod(int64_t a, int64_t m) {
  return ((a % m) + m) % m;
}

}  // namespace

int64_t ChunkPlan::body_tokens() const {
  return num_clips > 0 ? clip_token_end(num_clips - 1) : 0;
}

ChunkPlan plan_chunks(int64_t latent_frames, const TemporalParams& p) {
  if (p.clip_length <= 0 || p.ratio_t <= 0 || p.token_drop < 0) {
    throw Error(ErrorKind::kInvalidArgument,
                "temporal plan: clip_length and ratio_t must be positive and "
                "token_drop not negative");
  }
  ChunkPlan c;
  c.latent_frames = latent_frames;
  c.frame_pre_padding = pos_mod(-p.clip_length, p.ratio_t);
  c.tokens_chunk_size = (p.clip_length + p.ratio_t - 1) / p.ratio_t;
  c.token_overlap = pos_mod(-p.token_drop, c.tokens_chunk_size);
  c.frame_overlap = std::max<int64_t>(c.token_overlap * p.ratio_t - c.frame_pre_padding, 0);
  c.clip_frames = c.tokens_chunk_size * p.ratio_t;
  c.ratio_t = p.ratio_t;
  if (p.token_drop >= c.tokens_chunk_size) {
    throw Error(ErrorKind::kInvalidArgument, "temporal plan: token_drop " + std::to_string(p.token_drop) +
                                                 " must be smaller than the tokens per clip (" +
                                                 std::to_string(c.tokens_chunk_size) + ")");
  }

  // The released code only isolates the first frame when there is no pre-padding.
  c.head = p.isolated_first_frame && c.frame_pre_padding == 0;
  c.tail = p.isolated_last_frame;
  const int64_t isolated = (c.head ? 1 : 0) + (c.tail ? 1 : 0);
  const int64_t body = latent_frames - isolated;

  int64_t pseudo = body + p.token_drop;
  if (body >= 1) {
    c.pad_tokens = pos_mod(-pseudo, c.tokens_chunk_size);
    pseudo += c.pad_tokens;
    c.num_clips = pseudo / c.tokens_chunk_size - (p.token_drop > 0 ? 1 : 0);
  }
  const auto too_short = [&](const std::string& why) {
    return Error(ErrorKind::kInvalidArgument, "latents with " + std::to_string(latent_frames) +
                                                  " latent frame(s) are too short to decode: " + why +
                                                  " (the temporal plan needs at least one whole clip of " +
                                                  std::to_string(c.tokens_chunk_size + c.token_overlap) +
                                                  " latents after padding; give 3 or more latent frames)");
  };
  if (c.num_clips <= 0) throw too_short("no temporal chunk fits");

  // Logical parts in output order. Every clip holds tokens_chunk_size + token_overlap
  // latents (padding guarantees it), plus the head/tail latent on the first/last clip,
  // whose 4 frames are cut before the split.
  const bool split = p.token_drop > 0;
  const int64_t clip_tokens = c.tokens_chunk_size + c.token_overlap;
  if (c.head) c.parts.push_back({PartKind::kHead, 0, 1});
  int64_t final_overlap = 0;
  for (int64_t i = 0; i < c.num_clips; ++i) {
    const int64_t frames = clip_tokens * p.ratio_t;  // after the head/tail frames are cut
    const int64_t main_end = std::min(c.clip_frames, frames);
    c.parts.push_back({PartKind::kMain, i, std::max<int64_t>(0, main_end - c.frame_pre_padding)});
    if (split) final_overlap = std::max<int64_t>(0, frames - c.clip_frames - c.frame_pre_padding);
  }
  if (final_overlap > 0) c.parts.push_back({PartKind::kOverlap, c.num_clips - 1, final_overlap});
  if (c.tail) c.parts.push_back({PartKind::kTail, c.num_clips - 1, 1});

  for (const auto& part : c.parts) c.total_frames += part.frames;

  // Pad latents decode to ratio_t frames each, except one that starts a new encoder
  // clip, which stands for the clip's intra-clip tail (clip_length mod ratio_t frames).
  const int64_t intra_tail = p.clip_length % p.ratio_t;
  for (int64_t k = 0; k < c.pad_tokens; ++k) {
    const bool starts_clip = pos_mod(body + k, c.tokens_chunk_size) == 0;
    c.pad_frames += (intra_tail != 0 && starts_clip) ? intra_tail : p.ratio_t;
  }
  c.output_frames = c.total_frames - c.pad_frames;
  if (c.output_frames <= 0) {
    throw too_short("the plan gives " + std::to_string(c.output_frames) + " output frames (" +
                    std::to_string(c.total_frames) + " decoded, " + std::to_string(c.pad_frames) +
                    " of padding)");
  }

  int64_t pos = 0;
  for (size_t k = 0; k < c.parts.size(); ++k) {
    const int64_t n = std::min(c.parts[k].frames, c.output_frames - pos);
    if (n <= 0) break;
    c.chunks.push_back({static_cast<int64_t>(k), pos, n});
    pos += n;
  }
  return c;
}

}  // namespace h3::vae
