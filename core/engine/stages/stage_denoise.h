// The denoise stage: the request's seeded noise, drawn on rank 0 and broadcast so that every
// rank starts from the very same numbers, then N - 1 Euler steps of the tensor-parallel DiT
// with a cancel agreed after each; the final latents go to the caller's observer when asked.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "dit/sampler.h"
#include "engine/process/job.h"
#include "engine/stages/stage.h"
#include "text/conditioning.h"

namespace h3::engine_detail {

// Every rank: attaches the request's LoRA to this rank's DiT (its shards), or takes off the
// one an earlier request attached, unless it holds that one already; a failure on any rank
// fails every rank (each keeps what it held). The requests in flight share the DiT and its
// adapters: while others run, a request whose LoRA differs from the one attached is refused
// (kInvalidArgument naming both), and they go on.
void adapter_stage(const StageContext& c, const std::string& lora);

// Every rank, with the job's adaln_tables option: the DiT computes the AdaLN rows of `sets` (the
// request's evaluations) once and drops its AdaLN projections, reading them again first when
// they left for another grid; a failure on any rank fails every rank. With other requests in
// flight the tables hold the union of their sets and this one's (each entry is computed alone,
// so a request's rows are the same bits whatever else is in the tables).
void adaln_stage(const StageContext& c, const Job& job, const std::vector<dit::TimestepSet>& sets);

// Every rank: the final latents, fp32 CPU: video [1, C, T, h, w] and audio rows [2A, 32]
// (the same on every rank). FL2VA: `keyframes` are the clean conditioning latents [1, C, 1, h, w]
// at `anchors`; each is noised to the keyframe level with its own draw of the request's
// generator (drawn before the video's and audio's) and held through every step. Ref2VA: the
// anchors after the keyframes are the plan's pictured references in order, and `sounds` holds
// one entry per planned reference (reference_sounds_stage): its clean sound rows, held at t = 1,
// or undefined.
dit::Latents denoise_stage(const StageContext& c, const Job& job, const text::Conditioning& cond,
                           const std::vector<at::Tensor>& keyframes = {},
                           const std::vector<dit::KeyframeAnchor>& anchors = {},
                           const std::vector<at::Tensor>& sounds = {});

}  // namespace h3::engine_detail
