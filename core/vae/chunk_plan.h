// The temporal chunk plan of the released decode (docs/h3-model.md §7.3), as a pure
// function of the latent length and the temporal constants.
//
// The decoder runs on clips of `tokens_chunk_size + token_overlap` latents
// (5 + 2 in the release), each decoded to 4 frames per latent. Clip i gives a
// "main" part (its first 20 frames minus 3 pre-padding frames = 17, whose first
// 5 are cross-faded with the previous clip's overlap) and an "overlap" part
// (its last 8 frames minus 3 = 5) kept for the next clip. The last overlap is
// emitted after the last clip. With the isolated head (tail), one extra latent
// is prepended to the first (appended to the last) clip; of its 4 decoded
// frames only index 3 (the last) is kept, as a 1-frame part before (after)
// everything else. Pad latents (repeats of the last one) make the token count
// fit whole clips; the frames they add are trimmed from the end of the output,
// which may shorten or remove the last parts.
//
// Every logical part is one chunk for the sink, unless trimming empties it.
#pragma once

#include <cstdint>
#include <vector>

namespace h3::vae {

struct TemporalParams {
  int64_t clip_length = 17;  // pixel frames per encoder clip
  int64_t token_drop = 3;
  int64_t ratio_t = 4;  // frames per latent
  bool isolated_first_frame = false;
  bool isolated_last_frame = false;
};

enum class PartKind { kHead, kMain, kOverlap, kTail };

// One logical part of the decoded stream, in output order.
struct PlannedPart {
  PartKind kind;
  int64_t clip;    // the decoder call that produces it
  int64_t frames;  // logical frames (before the pad trim)
};

// One chunk the sink receives: a logical part cut to the output length.
struct PlannedChunk {
  int64_t part;         // index into ChunkPlan::parts
  int64_t first_frame;  // output frame number of its first frame
  int64_t frames;       // > 0
};

struct ChunkPlan {
  // Derived temporal constants (§7.1).
  int64_t frame_pre_padding = 0;  // (-clip_length) mod ratio_t
  int64_t tokens_chunk_size = 0;  // ceil(clip_length / ratio_t)
  int64_t token_overlap = 0;      // (-token_drop) mod tokens_chunk_size
  int64_t frame_overlap = 0;      // max(token_overlap * ratio_t - frame_pre_padding, 0)
  int64_t clip_frames = 0;        // frames of the main split: tokens_chunk_size * ratio_t
  int64_t ratio_t = 0;            // frames per latent

  int64_t latent_frames = 0;  // T as given
  bool head = false;          // isolated first frame active (needs frame_pre_padding == 0)
  bool tail = false;          // isolated last frame active
  int64_t pad_tokens = 0;     // repeats of the last body latent appended
  int64_t num_clips = 0;      // decoder calls

  std::vector<PlannedPart> parts;
  int64_t total_frames = 0;   // sum of the logical parts
  int64_t pad_frames = 0;     // trimmed from the end
  int64_t output_frames = 0;  // total_frames - pad_frames
  std::vector<PlannedChunk> chunks;

  // Latent index range [begin, end) of clip i inside the body: the latents left after
  // taking off the head and tail latents, followed by the pad latents.
  int64_t clip_token_begin(int64_t i) const { return i * tokens_chunk_size; }
  int64_t clip_token_end(int64_t i) const {
    return i * tokens_chunk_size + tokens_chunk_size + token_overlap;
  }
  int64_t body_tokens() const;  // latents in the padded body
};

// Plans the decode of `latent_frames` latents. Throws h3::Error(kInvalidArgument) when the
// latent is too short to give a single output frame (T = 1 or 2 in the release).
ChunkPlan plan_chunks(int64_t latent_frames, const TemporalParams& p);

}  // namespace h3::vae
