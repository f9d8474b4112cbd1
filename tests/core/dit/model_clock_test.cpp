// The model's clock (include/h3/model_clock.h): its numbers, the functions derived from them, and
// that the frame arithmetic, the chunk layout and the reference reader agree with it.
#include "h3/model_clock.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "dit/chunk_layout.h"
#include "dit/frames.h"
#include "h3/limits.h"

namespace h3::dit {
namespace {

TEST(ModelClock, TheReleasesNumbers) {
  EXPECT_EQ(kFps, 24);
  EXPECT_EQ(kChunkFrames, 17);
  EXPECT_EQ(kChunkLatents, 5);
  EXPECT_EQ(kTailFrames, 5);
  EXPECT_EQ(kTailLatents, 2);
  EXPECT_EQ(kDroppedLatents, 3);
  EXPECT_EQ(kMinDecodedFrames, 22);
  EXPECT_EQ(clip_frames(0), 5);
  EXPECT_EQ(clip_frames(7), 124);
  EXPECT_EQ(chunk_first_frame(6), 102);
  EXPECT_DOUBLE_EQ(chunk_start_seconds(2), 34.0 / 24.0);
  EXPECT_DOUBLE_EQ(frames_seconds(22), 22.0 / 24.0);
  // A chunk's latents span its 17 frames: 1, 4, 4, 4, 4; the next chunk's first latent 1 again.
  int64_t spanned = 0;
  for (int64_t k = 0; k < kChunkLatents; ++k) spanned += latent_frames_spanned(k);
  EXPECT_EQ(spanned, kChunkFrames);
  EXPECT_EQ(latent_frames_spanned(0), 1);
  EXPECT_EQ(latent_frames_spanned(4), 4);
  EXPECT_EQ(latent_frames_spanned(5), 1);
  EXPECT_EQ(kAudioLatentsPerFrame, 5.0 / 3.0);  // the very double the golden positions use
  // The endless stream's last chunk starts 19.7 hours in.
  EXPECT_NEAR(chunk_start_seconds(kMaxEndlessChunks) / 3600, 19.676, 1e-3);
}

// Every clip of n chunks is 17n+5 frames and 5n+2 latents, and chunk c's rows start where the
// clock says (in audio latents: 40 a second).
TEST(ModelClock, FramesLatentsAndTheChunkLayoutAgree) {
  for (int64_t n = 0; n <= 60; ++n) {
    const int64_t frames = clip_frames(n);
    EXPECT_TRUE(is_valid_pixel_frames(frames)) << n;
    EXPECT_EQ(latent_frames_for(frames), kChunkLatents * n + kTailLatents) << n;
    EXPECT_EQ(pixel_frames_for(kChunkLatents * n + kTailLatents), frames) << n;
    EXPECT_EQ(snap_pixel_frames(frames - kChunkFrames + 1), std::max<int64_t>(frames, kTailFrames)) << n;
    // n whole chunks and the tail.
    EXPECT_EQ(static_cast<int64_t>(cut_chunks(latent_frames_for(frames), audio_latents_for(frames)).size()),
              n + 1);
  }
  for (int64_t c :
       {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{3}, int64_t{50}, int64_t{9999}, kMaxEndlessChunks}) {
    // The very double the layout always had (c * 85 / 3): the causal golden positions rest on it.
    EXPECT_EQ(chunk_start_time(c), static_cast<double>(c) * 85.0 / 3.0) << c;
    EXPECT_NEAR(chunk_start_time(c), chunk_start_seconds(c) * kAudioLatentsPerSecond, 1e-6) << c;
    EXPECT_EQ(full_chunk(c).video_begin * kChunkFrames, chunk_first_frame(c) * kChunkLatents) << c;
  }
}

// A video reference is read for at least the frames the engine generates for the clip (17n+5, at
// least 22), and never for a whole chunk more.
TEST(ModelClock, AReferenceIsReadForTheGeneratedFramesAndNoMore) {
  EXPECT_DOUBLE_EQ(reference_read_seconds(0), 39.0 / 24.0);
  EXPECT_DOUBLE_EQ(reference_read_seconds(22), 39.0 / 24.0);
  EXPECT_DOUBLE_EQ(reference_read_seconds(48), 65.0 / 24.0);
  EXPECT_DOUBLE_EQ(reference_read_seconds(124), 141.0 / 24.0);
  for (int64_t frames = 1; frames <= kMaxFrames; ++frames) {
    const int64_t generated = std::max(snap_pixel_frames(frames), kMinDecodedFrames);
    const double read = reference_read_seconds(frames);
    EXPECT_GT(read, frames_seconds(generated)) << frames;
    EXPECT_LE(read, frames_seconds(generated + kChunkFrames)) << frames;
  }
}

}  // namespace
}  // namespace h3::dit
