// The limits and defaults of a request and of the engine's options, written once: the engine
// enforces them (make_plan, Engine::open) and the GStreamer element's property ranges and
// defaults are these same numbers. Torch-free: the plugin includes it.
#pragma once

#include <chrono>
#include <cstdint>

namespace h3 {

// A request outside these ranges is h3::Error(kInvalidArgument) naming the field.
constexpr int64_t kMinSide = 16, kMaxSide = 4096;  // width, height in pixels
constexpr int64_t kMinFrames = 1, kMaxFrames = 1024;
constexpr int64_t kMinSteps = 2, kMaxSteps = 1000;  // grid points N (N-1 evaluations)
// An FL2VA keyframe or a Ref2VA reference as decoded, before the engine resizes it: each side at
// least one patch of the vision tower, at most 8192 x 8192 pixels (192 MiB of RGB).
constexpr int64_t kMinPictureSide = 16, kMaxPicturePixels = int64_t(8192) * 8192;
// Ref2VA: the references one request may carry, as released (diffusers' setup step): 9 images,
// 3 videos (a soundtrack comes with its video and counts as neither), 3 audio references, 12 in
// all.
constexpr int64_t kMaxReferenceImages = 9, kMaxReferenceVideos = 3, kMaxReferenceAudios = 3;
constexpr int64_t kMaxReferences = 12;
// A reference's sound is resampled as the reference pipelines do it (torchaudio's sinc kernels, one
// per output phase of the reduced rates): its filters at most 64 Mi elements (256 MiB in fp32).
// Every common rate needs far less (44.1 kHz: 147 k; 11,025 Hz: 582 k); a rate such as 44,101 Hz
// would need 1.4 G.
constexpr int64_t kMaxResampleKernel = int64_t(1) << 26;
// A video reference as decoded: its frames within the clip's longest duration, at most 2 GiB of
// RGB (diffusers decodes the whole file); at 24 fps at least the 13 frames whose 0th and 12th the
// conditioner reads at 2 fps (Qwen3-VL merges frames in pairs), as diffusers requires.
constexpr int64_t kMaxReferenceVideoBytes = int64_t(2) << 30, kMinReferenceVideoFrames = 13;

// The chunk-causal sampler (docs/causal.md): forwards per chunk, pinned KV-cache records (the
// text first), recent chunks kept (-1: none evicted), and RAVEN's defaults.
constexpr int64_t kMinCausalSteps = 1, kMaxCausalSteps = 64, kDefaultCausalSteps = 4;
constexpr int64_t kMinSink = 1, kMaxSink = 64, kDefaultSink = 2;
constexpr int64_t kMinWindow = -1, kMaxWindow = 64, kDefaultWindow = 2;
// An endless causal request ends after this many chunks of 17 frames (19.7 hours at 24 fps).
constexpr int64_t kMaxEndlessChunks = 100000;
constexpr int64_t kEndless = -1;  // num_frames of an endless request

// Ranks as threads in one process; every rank is a tensor-parallel rank of the DiT.
constexpr int kMinRanks = 1, kMaxRanks = 64;

// How long a rank waits at a collective for a peer that shows no sign of life.
constexpr std::chrono::seconds kDefaultTimeout{120};

}  // namespace h3
