// The causal generation (docs/causal.md): RAVEN-Streaming's chunk-causal sampler as the decode's
// latent source. The decode asks for each VAE clip's latents; the source runs the sampler's next
// chunks until they exist (5 latents a chunk: the first clip needs two chunks, every later
// clip one more), so the first 17 frames leave after two chunks of synthesis instead of after
// every step of the whole clip, and each chunk's soundtrack follows as soon as the audio
// decoder's context past it exists. Every rank runs the same sampler steps inside the same
// decode calls (the sampler's forwards are collectives); a failure inside a chunk fails every
// rank with the chunk's index.
#pragma once

#include "engine/process/job.h"
#include "engine/stages/stage.h"
#include "text/conditioning.h"

namespace h3::engine_detail {

// Every rank: the causal sampler for `job` on the conditioning, its chunks decoded and handed
// to rank 0's caller as they complete (video; and audio when the request asks for it). With
// job.want_latents, the whole clip's latents go to the observer after the last chunk.
void causal_stage(const StageContext& c, const Job& job, const text::Conditioning& cond);

}  // namespace h3::engine_detail
