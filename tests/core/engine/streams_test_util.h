// What the tests of many requests in flight at once share (docs/engine.md, "Many streams"):
// three streams of different prompts, sizes and samplers, each run on its own thread and kept
// whole, and a gate that proves they were in flight together.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "h3/error.h"

namespace h3::streams_test {

// All `n` streams must reach it before any goes on: reached by each stream's progress callback at
// its first denoising step, it shows that every stream was in flight at once (an engine that ran
// one request at a time would keep the first one waiting here for good).
class Gate {
 public:
  explicit Gate(int n) : left_(n) {}
  // False when the others did not all arrive within `bound` (a generous bound against a hang,
  // never a measure of speed).
  bool arrive_and_wait(std::chrono::seconds bound = std::chrono::seconds(300)) {
    std::unique_lock<std::mutex> lk(m_);
    if (--left_ <= 0) cv_.notify_all();
    return cv_.wait_for(lk, bound, [&] { return left_ <= 0; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int left_;
};

struct StreamSpec {
  std::string name;
  GenerationRequest request;
  int64_t finish_after = 0;  // an endless stream: finished when this many chunks arrived
  // Called with every progress report on the caller's thread (a prompt change, a cancel).
  std::function<void(const Progress&, StreamControl&)> on_progress;
  // Called with every chunk of frames (index), on the caller's thread; may throw.
  std::function<void(int64_t)> on_chunk;
};

struct StreamResult {
  std::vector<at::Tensor> frames;      // per chunk
  std::vector<at::Tensor> audio;       // per stretch
  std::vector<int64_t> prompt_chunks;  // the chunks new prompts applied from
  std::exception_ptr error;
  at::Tensor all_frames() const { return frames.empty() ? at::Tensor() : at::cat(frames, 0); }
  at::Tensor all_audio() const { return audio.empty() ? at::Tensor() : at::cat(audio, 0); }
  std::string error_text() const {
    if (!error) return "";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  ErrorKind error_kind() const {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      return e.kind();
    } catch (...) {
      return ErrorKind::kInternal;
    }
  }
};

// Runs `spec` on `e` on the calling thread; `gate` (optional) is reached at the first step.
inline StreamResult run_stream(Engine& e, const StreamSpec& spec, Gate* gate = nullptr) {
  StreamResult out;
  StreamControl token;
  class Sink : public ChunkSink {
   public:
    Sink(const StreamSpec& spec, StreamResult& out, StreamControl& token)
        : spec_(spec), out_(out), token_(token) {}
    void on_chunk(const Chunk& c) override {
      if (!c.frames.defined()) {
        out_.audio.push_back(c.audio);
        return;
      }
      out_.frames.push_back(c.frames);
      const int64_t n = static_cast<int64_t>(out_.frames.size());
      if (spec_.finish_after > 0 && n == spec_.finish_after) token_.finish();
      if (spec_.on_chunk) spec_.on_chunk(n - 1);
    }

   private:
    const StreamSpec& spec_;
    StreamResult& out_;
    StreamControl& token_;
  } sink(spec, out, token);
  bool gated = false;
  auto progress = [&](const Progress& p) {
    if (p.phase == Phase::kPrompt) out.prompt_chunks.push_back(p.chunk);
    if (gate && !gated && p.phase == Phase::kDenoising) {
      gated = true;
      EXPECT_TRUE(gate->arrive_and_wait()) << spec.name << ": the other streams never ran beside it";
    }
    if (spec.on_progress) spec.on_progress(p, token);
  };
  try {
    e.generate(spec.request, sink, progress, token);
  } catch (...) {
    out.error = std::current_exception();
  }
  return out;
}

// Every spec on a thread of its own, all in flight at once (the gate), in the order given.
inline std::vector<StreamResult> run_together(Engine& e, const std::vector<StreamSpec>& specs) {
  Gate gate(static_cast<int>(specs.size()));
  std::vector<StreamResult> out(specs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < specs.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = run_stream(e, specs[i], &gate); });
  }
  for (auto& t : threads) t.join();
  return out;
}

// The same frames and soundtrack, byte for byte.
inline void expect_same_stream(const StreamResult& together, const StreamResult& alone,
                               const std::string& what) {
  ASSERT_FALSE(alone.error) << what << " alone failed: " << alone.error_text();
  ASSERT_FALSE(together.error) << what << " beside the others failed: " << together.error_text();
  ASSERT_EQ(together.frames.size(), alone.frames.size()) << what;
  for (size_t i = 0; i < alone.frames.size(); ++i) {
    EXPECT_TRUE(at::equal(together.frames[i], alone.frames[i]))
        << what << ": chunk " << i << "'s frames differ";
  }
  ASSERT_EQ(together.audio.size(), alone.audio.size()) << what;
  for (size_t i = 0; i < alone.audio.size(); ++i) {
    EXPECT_TRUE(at::equal(together.audio[i], alone.audio[i])) << what << ": stretch " << i << " differs";
  }
  EXPECT_EQ(together.prompt_chunks, alone.prompt_chunks) << what;
}

// Three streams of different prompts, sizes and samplers: an euler clip, a causal clip and an
// endless causal stream whose prompt changes at its second chunk's last step (so from its third
// chunk on) and which is finished after four chunks; each with its soundtrack.
inline std::vector<StreamSpec> three_streams() {
  std::vector<StreamSpec> s(3);
  s[0].name = "the euler clip";
  s[0].request.prompt = "a red circle moving right on a black background";
  s[0].request.width = 80;
  s[0].request.height = 48;
  s[0].request.num_frames = 30;
  s[0].request.steps = 4;
  s[0].request.seed = 3;
  s[0].request.audio = true;

  s[1].name = "the causal clip";
  s[1].request.prompt = "a green square moving up";
  s[1].request.width = 64;
  s[1].request.height = 64;
  s[1].request.num_frames = 39;
  s[1].request.seed = 4;
  s[1].request.sampler = Sampler::kCausal;
  s[1].request.steps = 2;
  s[1].request.audio = true;

  s[2].name = "the endless stream";
  s[2].request.prompt = "a blue triangle moving left";
  s[2].request.width = 96;
  s[2].request.height = 48;
  s[2].request.num_frames = kEndless;
  s[2].request.seed = 5;
  s[2].request.sampler = Sampler::kCausal;
  s[2].request.steps = 3;
  s[2].request.audio = true;
  s[2].finish_after = 4;
  s[2].on_progress = [](const Progress& p, StreamControl& t) {
    if (p.phase == Phase::kDenoising && p.step == 2 * 3) t.change_prompt("a yellow star spinning");
  };
  return s;
}

}  // namespace h3::streams_test
