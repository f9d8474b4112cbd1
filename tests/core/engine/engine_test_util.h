#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <string>
#include <vector>

#include "../../temp_dir.h"
#include "../text/golden_encoder.h"
#include "../text/text_test_util.h"
#include "dit/config.h"
#include "dit/random_model.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/planning/plan.h"
#include "h3/error.h"
#include "tools/tiny_model.h"

namespace h3::test {

// Keeps every chunk; checks the contract's ordering as they arrive. A request with audio hands
// each chunk's soundtrack stretch over after its frames, in a chunk of the same index without
// frames: those go to `audio`.
class CollectSink : public ChunkSink {
 public:
  void on_chunk(const Chunk& c) override {
    if (!c.frames.defined()) {
      EXPECT_TRUE(c.audio.defined()) << "a chunk with neither frames nor audio";
      EXPECT_EQ(c.index, static_cast<int64_t>(chunks.size()) - 1) << "audio before its chunk's frames";
      EXPECT_EQ(c.index, static_cast<int64_t>(audio.size())) << "two stretches for one chunk";
      audio.push_back(c);
      return;
    }
    EXPECT_FALSE(c.audio.defined()) << "frames and audio in one hand-over";
    EXPECT_EQ(c.index, static_cast<int64_t>(chunks.size()));
    EXPECT_EQ(c.first_frame, frames_so_far);
    EXPECT_FALSE(seen_final) << "a chunk after the final one";
    EXPECT_TRUE(c.frames.is_contiguous());
    EXPECT_EQ(c.frames.scalar_type(), at::kByte);
    seen_final = c.final;
    frames_so_far += c.frames.size(0);
    chunks.push_back(c);
  }
  at::Tensor all() const {
    std::vector<at::Tensor> f;
    for (const auto& c : chunks) f.push_back(c.frames);
    return at::cat(f, 0);
  }
  std::vector<Chunk> chunks;  // the frames' chunks
  std::vector<Chunk> audio;   // the soundtrack's stretches, one per chunk, after its frames
  int64_t frames_so_far = 0;
  bool seen_final = false;
};

// Extras whose on_latents keeps copies of the final latents in *video and *audio.
inline GenerateExtras keep_latents(at::Tensor* video, at::Tensor* audio) {
  GenerateExtras x;
  x.on_latents = [video, audio](const at::Tensor& v, const at::Tensor& a) {
    *video = v.clone();
    *audio = a.clone();
  };
  return x;
}

inline std::unique_ptr<Engine> open_tiny(int ranks) {
  EngineOptions o;
  o.model_dir = default_model_dir();
  o.ranks = ranks;
  o.timeout = std::chrono::seconds(60);
  return Engine::open(o);
}

// A request's frames and final latents.
struct Clip {
  at::Tensor frames, video, audio;
};

// A seeded picture: a gradient with noise, so that two seeds differ everywhere.
inline Picture picture(int64_t w, int64_t h, uint64_t seed, const std::string& name = "test.png") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto x = at::linspace(0, 1, w).view({1, w, 1}).expand({h, w, 3});
  auto y = at::linspace(0, 1, h).view({h, 1, 1}).expand({h, w, 3});
  auto noise = at::rand({h, w, 3}, gen);
  auto t = ((x * 0.4 + y * 0.3 + noise * 0.3) * 255).round().clamp(0, 255).to(at::kByte).contiguous();
  Picture p;
  p.source = name;
  p.width = w;
  p.height = h;
  p.rgb.assign(t.data_ptr<uint8_t>(), t.data_ptr<uint8_t>() + t.numel());
  return p;
}

// The message of make_plan's refusal of `r` (kInvalidArgument), or a test failure.
inline std::string refusal(const ModelInfo& m, const GenerationRequest& r) {
  try {
    make_plan(m, r);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "the request was planned";
  return {};
}

// Runs `r` to its end on `e`, keeping everything.
inline Clip generate_clip(Engine& e, const GenerationRequest& r) {
  CollectSink sink;
  Clip out;
  StreamControl cancel;
  e.generate(r, sink, {}, cancel, keep_latents(&out.video, &out.audio));
  EXPECT_TRUE(sink.seen_final);
  out.frames = sink.all();
  return out;
}

// The tiny model with FL2VA's condition path (`h3 make-tiny --conditioning`, the default seed),
// written once per test program into a scratch folder and removed at exit.
inline const std::string& conditioning_model_dir() {
  struct Model : TempDir {
    Model() : TempDir("conditioning-model") {
      write_random_model(str(), tiny_conditioning_spec(), kTinyDefaultSeed);
    }
  };
  static const Model model;
  return model.str();
}

// An engine on conditioning_model_dir(): FL2VA's DiT, or with `ref2va` Ref2VA's.
inline std::unique_ptr<Engine> open_conditioning_model(int ranks, bool ref2va = false) {
  EngineOptions o;
  o.model_dir = conditioning_model_dir();
  o.ranks = ranks;
  o.ref2va = ref2va;
  o.timeout = std::chrono::seconds(120);
  return Engine::open(o);
}

// `r` (with its prompt) and `r` with the embeddings file `embeds` instead give the same clip bit for
// bit on `e`: what `h3 encode-prompt` writes ahead is the presentation the engine builds itself.
inline void expect_embeddings_give_the_prompts_clip(Engine& e, GenerationRequest r,
                                                    const std::string& embeds) {
  const Clip prompted = generate_clip(e, r);
  r.prompt.clear();
  r.embeds_path = embeds;
  const Clip embedded = generate_clip(e, r);
  EXPECT_TRUE(at::equal(prompted.video, embedded.video));
  EXPECT_TRUE(at::equal(prompted.frames, embedded.frames));
}

// `r` at 1 and at 2 ranks on conditioning_model_dir(): the vision tower and the DiT split over
// the ranks sum in another order, so within 1e-4 (latents) and 1 (frames), not bit for bit.
inline void expect_two_ranks_give_one_ranks_clip(const GenerationRequest& r, bool ref2va) {
  const Clip one = generate_clip(*open_conditioning_model(1, ref2va), r);
  const Clip two = generate_clip(*open_conditioning_model(2, ref2va), r);
  ASSERT_TRUE(one.video.defined() && two.video.defined());
  EXPECT_LT(max_abs_diff(one.video, two.video), 1e-4);
  EXPECT_LT(max_abs_diff(one.audio, two.audio), 1e-4);
  EXPECT_LE(max_abs_diff(one.frames.to(at::kInt), two.frames.to(at::kInt)), 1);
}

// A random LoRA for the tiny default model (rank 4, alpha 8, seed 2029), written once per test
// program and removed at exit.
inline const std::string& tiny_lora() {
  struct Lora : TempDir {
    Lora() : TempDir("tiny-lora") {
      dit::write_random_lora(str(), dit::DitConfig::load(default_model_dir() + "/transformer"), 4, 8.0, 2029);
    }
  };
  static const Lora lora;
  return lora.str();
}

}  // namespace h3::test
