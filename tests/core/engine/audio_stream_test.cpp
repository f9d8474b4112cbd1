// The engine's soundtrack on the tiny default model (which has an audio VAE): each chunk's
// stretch, aligned with its frames, the stretches together equal to the whole decode, the
// exact sample count, one rank as two, and a model folder without audio_vae/.
#include <gtest/gtest.h>

#include <filesystem>

#include "audio/audio_decoder.h"
#include "dit/frames.h"
#include "engine_test_util.h"

namespace h3 {
namespace {

using test::CollectSink;
using test::open_tiny;

GenerationRequest with_audio(int64_t frames) {
  GenerationRequest r;
  r.prompt = "a bell rings twice";
  r.width = 80;
  r.height = 48;
  r.num_frames = frames;
  r.steps = 3;
  r.seed = 11;
  r.audio = true;
  return r;
}

struct AudioOutcome {
  CollectSink sink;
  at::Tensor rows;  // the final audio latents [2A, 32]
  ClipPlan plan{};
};

void generate_audio(Engine& e, const GenerationRequest& r, AudioOutcome* out) {
  out->plan = e.plan(r);
  StreamControl cancel;
  GenerateExtras x;
  x.on_latents = [&](const at::Tensor&, const at::Tensor& a) { out->rows = a.clone(); };
  e.generate(r, out->sink, {}, cancel, x);
}

at::Tensor soundtrack(const CollectSink& s) {
  std::vector<at::Tensor> parts;
  for (const auto& c : s.audio) parts.push_back(c.audio);
  return at::cat(parts, 0);  // [N, 2]
}

// 30 frames (generated as 39): several chunks, and rows past the trimmed frames.
TEST(EngineAudio, EachChunkCarriesTheStretchUpToItsLastFrameAndTogetherTheWholeDecode) {
  auto e = open_tiny(1);
  AudioOutcome o;
  generate_audio(*e, with_audio(30), &o);
  ASSERT_GE(o.sink.chunks.size(), 2u);
  ASSERT_EQ(o.sink.audio.size(), o.sink.chunks.size()) << "one stretch per chunk, each after its frames";
  EXPECT_EQ(o.plan.audio_samples, 800 * 50);  // round(30 * 5 / 3) = 50 latents
  EXPECT_EQ(o.plan.audio_rate, 32000);        // the tiny model's audio_vae/config.json
  int64_t frames = 0, samples = 0;
  for (size_t i = 0; i < o.sink.chunks.size(); ++i) {
    const Chunk& c = o.sink.audio[i];
    ASSERT_TRUE(c.audio.defined()) << "chunk " << c.index;
    EXPECT_EQ(c.index, static_cast<int64_t>(i));
    EXPECT_EQ(c.audio.scalar_type(), at::kFloat);
    ASSERT_EQ(c.audio.dim(), 2);
    EXPECT_EQ(c.audio.size(1), 2);
    EXPECT_TRUE(c.audio.is_contiguous());
    EXPECT_EQ(c.first_sample, samples) << "chunk " << c.index;
    frames += o.sink.chunks[i].frames.size(0);
    EXPECT_EQ(c.first_frame, frames) << "a stretch names where its frames end";
    samples += c.audio.size(0);
    // Up to the matching point of the chunk's last frame: 800 * round(frames * 5 / 3).
    EXPECT_EQ(samples, 800 * dit::audio_latents_for(frames)) << "chunk " << c.index;
  }
  EXPECT_EQ(samples, o.plan.audio_samples);

  const at::Tensor got = soundtrack(o.sink);
  EXPECT_LE(got.abs().max().item<double>(), 1.0);
  EXPECT_GT(got.abs().max().item<double>(), 0.0);
  const auto dec = audio::AudioDecoder::load(e->model().audio_vae_dir);
  const at::Tensor whole = dec.decode(o.rows).narrow(1, 0, o.plan.audio_samples).t();  // [N, 2]
  ASSERT_EQ(got.sizes(), whole.sizes());
  const double diff = (got - whole).abs().max().item<double>();
  std::printf("streamed soundtrack vs the whole decode: max |diff| = %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);
}

TEST(EngineAudio, TwoRanksMakeTheSameSoundtrackAsOne) {
  AudioOutcome one, two;
  generate_audio(*open_tiny(1), with_audio(22), &one);
  generate_audio(*open_tiny(2), with_audio(22), &two);
  const at::Tensor a = soundtrack(one.sink), b = soundtrack(two.sink);
  ASSERT_EQ(a.size(0), 800 * 37);
  ASSERT_EQ(a.sizes(), b.sizes());
  EXPECT_LE((a - b).abs().max().item<double>(), 1e-4);
}

TEST(EngineAudio, AVideoOnlyRequestCarriesNoAudio) {
  auto e = open_tiny(1);
  GenerationRequest r = with_audio(22);
  r.audio = false;
  CollectSink sink;
  StreamControl cancel;
  e->generate(r, sink, {}, cancel);
  ASSERT_FALSE(sink.chunks.empty());
  EXPECT_TRUE(sink.audio.empty());
  for (const Chunk& c : sink.chunks) EXPECT_FALSE(c.audio.defined());
}

TEST(EngineAudio, AModelWithoutAnAudioVaeRefusesAudioNamingTheFolderAndServesVideo) {
  namespace fs = std::filesystem;
  test::TempDir d("noaudio");
  for (const auto& entry : fs::directory_iterator(default_model_dir())) {
    if (entry.path().filename() != "audio_vae")
      fs::create_symlink(entry.path(), fs::path(d.str()) / entry.path().filename());
  }
  EngineOptions o;
  o.model_dir = d.str();
  o.ranks = 2;
  o.timeout = std::chrono::seconds(60);
  auto e = Engine::open(o);
  EXPECT_TRUE(e->model().audio_vae_dir.empty());
  const std::string folder = d / "audio_vae";
  test::expect_error([&] { e->plan(with_audio(22)); }, ErrorKind::kNotFound, {folder, "no audio VAE"});
  CollectSink sink;
  StreamControl cancel;
  test::expect_error([&] { e->generate(with_audio(22), sink, {}, cancel); }, ErrorKind::kNotFound, {folder});
  EXPECT_TRUE(sink.chunks.empty());
  GenerationRequest video = with_audio(22);
  video.audio = false;
  e->generate(video, sink, {}, cancel);
  EXPECT_EQ(sink.frames_so_far, 22);
}

}  // namespace
}  // namespace h3
