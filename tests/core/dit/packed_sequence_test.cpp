// The packed sequence (docs/h3-model.md §5) and the frame arithmetic (§12).
#include "dit/packed_sequence.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "dit/frames.h"
#include "h3/error.h"

namespace h3::dit {
namespace {

DitConfig small_config() {
  DitConfig c;
  c.hidden_size = 32;
  c.num_layers = 1;
  c.num_heads = 2;
  c.head_dim = 32;
  c.ffn_dim = 64;
  c.text_dim = 8;
  c.time_embed_hidden_dim = 16;
  c.time_embed_dim = 8;
  c.rope_freq_dim = 4;
  return c;
}

DitInputs inputs(int64_t t, int64_t h, int64_t w, int64_t l = 3, int64_t a = 4) {
  DitInputs in;
  in.text = at::randn({l, 8});
  in.video = at::randn({1, 24, t, h, w});
  in.audio = at::randn({2 * a, 32});
  in.t_video = 0.25f;
  in.t_audio = 0.5f;
  return in;
}

TEST(Frames, PixelAndLatentFrames) {
  EXPECT_EQ(latent_frames_for(5), 2);
  EXPECT_EQ(latent_frames_for(22), 7);
  EXPECT_EQ(latent_frames_for(124), 37);
  EXPECT_EQ(latent_frames_for(243), 72);
  EXPECT_EQ(pixel_frames_for(37), 124);
  EXPECT_EQ(pixel_frames_for(107), 362);
  EXPECT_EQ(snap_pixel_frames(121), 124);
  EXPECT_EQ(snap_pixel_frames(124), 124);
  EXPECT_EQ(snap_pixel_frames(1), 5);
  EXPECT_EQ(audio_latents_for(124), 207);
  EXPECT_EQ(audio_latents_for(22), 37);
  EXPECT_EQ(audio_latents_for(5), 8);
  EXPECT_EQ(audio_latents_for(243), 405);
  EXPECT_THROW(latent_frames_for(121), Error);
  EXPECT_THROW(pixel_frames_for(36), Error);
  auto g = latent_geometry(124, 864, 480);
  EXPECT_EQ(g.t, 37);
  EXPECT_EQ(g.h, 30);
  EXPECT_EQ(g.w, 54);
  EXPECT_EQ(g.audio, 207);
  try {
    latent_geometry(124, 100, 64);
    FAIL() << "a 100-px-wide canvas is not a multiple of 32";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("multiples of 32"), std::string::npos);
  }
}

TEST(PackedSequence, PatchifyIsChannelMajorWithinARowAndInvertible) {
  auto lat = at::randn({1, 24, 2, 4, 6});
  auto rows = patchify_video(lat, 2, 2);
  ASSERT_EQ(rows.sizes(), (at::IntArrayRef{2 * 2 * 3, 96}));
  // Row (t=1, hp=1, wp=2), column c*4 + ph*2 + pw = latent[c, 1, 2 + ph, 4 + pw].
  const int64_t row = 1 * 6 + 1 * 3 + 2;
  for (int64_t c : {0, 5, 23}) {
    for (int64_t ph = 0; ph < 2; ++ph) {
      for (int64_t pw = 0; pw < 2; ++pw) {
        EXPECT_EQ(rows[row][c * 4 + ph * 2 + pw].item<float>(), lat[0][c][1][2 + ph][4 + pw].item<float>());
      }
    }
  }
  EXPECT_TRUE(at::equal(unpatchify_video(rows, 24, 2, 4, 6, 2, 2), lat));
}

TEST(PackedSequence, PositionsFollowTheTextAudioVideoClocks) {
  const int64_t l = 5, a = 3, t = 7, gh = 2, gw = 3;
  auto pos = packed_positions(l, a, t, gh, gw);
  ASSERT_EQ(pos.size(0), l + 2 * a + t * gh * gw);
  ASSERT_EQ(pos.scalar_type(), at::kDouble);
  auto p = pos.accessor<double, 2>();
  for (int64_t i = 0; i < l; ++i) {
    EXPECT_EQ(p[i][0], i);
    EXPECT_EQ(p[i][1], 0);
    EXPECT_EQ(p[i][2], 0);
  }
  // Area-normalised grid: r = n / sqrt(gh * gw), start (1 - r) / 2, n points over r, times 32.
  auto grid = [&](int64_t n, int64_t i) {
    const double r = n / std::sqrt(double(gh * gw));
    return ((1 - r) / 2 + i * r / n) * 32;
  };
  for (int64_t i = 0; i < a; ++i) {
    EXPECT_EQ(p[l + i][0], l + i);
    EXPECT_NEAR(p[l + i][2], grid(gw, 0), 1e-12);  // left channel: first grid column
    EXPECT_EQ(p[l + a + i][0], l + i);
    EXPECT_NEAR(p[l + a + i][2], grid(gw, gw - 1), 1e-12);  // right channel: last grid column
    EXPECT_EQ(p[l + i][1], 0);
  }
  const double spans[] = {0, 5.0 / 3, 25.0 / 3, 45.0 / 3, 65.0 / 3, 85.0 / 3, 90.0 / 3};
  for (int64_t k = 0; k < t; ++k) {
    for (int64_t i = 0; i < gh; ++i) {
      for (int64_t j = 0; j < gw; ++j) {
        const int64_t r = l + 2 * a + (k * gh + i) * gw + j;
        EXPECT_NEAR(p[r][0], l + spans[k], 1e-12) << k;
        EXPECT_NEAR(p[r][1], grid(gh, i), 1e-12);
        EXPECT_NEAR(p[r][2], grid(gw, j), 1e-12);
      }
    }
  }
}

TEST(PackedSequence, TagsAndTimestepsPerRow) {
  auto in = inputs(2, 4, 6);
  in.text_tags = at::tensor(std::vector<int64_t>{1, 0, 1});
  auto s = pack(small_config(), in);
  EXPECT_EQ(s.layout.text, 3);
  EXPECT_EQ(s.layout.audio, 8);
  EXPECT_EQ(s.layout.video, 12);
  std::vector<int64_t> tags(s.tags.data_ptr<int64_t>(), s.tags.data_ptr<int64_t>() + s.tags.numel());
  std::vector<int64_t> want = {1, 0, 1};
  want.insert(want.end(), 8, kTagAudio);
  want.insert(want.end(), 12, kTagVideo);
  EXPECT_EQ(tags, want);
  EXPECT_EQ(s.timesteps[0].item<float>(), 0.25f);   // text rows follow the video
  EXPECT_EQ(s.timesteps[3].item<float>(), 0.5f);    // audio
  EXPECT_EQ(s.timesteps[11].item<float>(), 0.25f);  // video
}

void expect_invalid(const DitInputs& in, const std::string& needle) {
  try {
    pack(small_config(), in);
    FAIL() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PackedSequence, BadInputsAreClearErrors) {
  auto in = inputs(7, 4, 6);
  in.text = at::randn({3, 9});
  expect_invalid(in, "text_dim is 8");
  expect_invalid(inputs(3, 4, 6), "5n+2");       // a frame count the model cannot represent
  expect_invalid(inputs(7, 5, 6), "32 pixels");  // an odd latent canvas
  auto odd_audio = inputs(7, 4, 6);
  odd_audio.audio = at::randn({7, 32});
  expect_invalid(odd_audio, "stereo");
  auto bad_t = inputs(7, 4, 6);
  bad_t.t_video = 1.5f;
  expect_invalid(bad_t, "t_video");
  auto bad_tags = inputs(7, 4, 6);
  bad_tags.text_tags = at::tensor(std::vector<int64_t>{1, 5, 1});
  expect_invalid(bad_tags, "tags");
}

}  // namespace
}  // namespace h3::dit
