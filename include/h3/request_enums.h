// The closed sets of a request and its plan: the sampler, a reference's kind and a keyframe's
// place. Each has one spelling for users, messages and the job's wire ("euler", "video",
// "first", ...): to_string gives it, parse_* reads it back. Torch-free: the plugin includes it.
#pragma once

#include <string>

namespace h3 {

// How a clip is synthesised (GenerationRequest::sampler): kEuler, the release's flow-matching
// sampler over the whole clip; kCausal, RAVEN-Streaming's chunk-causal sampler (docs/causal.md).
enum class Sampler { kEuler, kCausal };
// What a Ref2VA reference is, as planned (PlannedReference::kind).
enum class ReferenceKind { kImage, kVideo, kAudio };
// Which frame of the clip an FL2VA keyframe pins (ClipPlan::keyframe_anchors).
enum class Keyframe { kFirst, kLast };
// Where a causal request's chunks sit on the DiT's media clock (GenerationRequest::positions,
// docs/causal.md "Positions"): kAbsolute, at the dense layout's positions however far the stream
// has gone; kRelative, the retained window and the current chunk moved back in steps of 3 chunks
// once the stream passes the model's trained length, so that the DiT never sees a position a clip
// of that length lacks; kAuto, relative for an endless stream and absolute for a finite clip.
enum class CausalPositions { kAuto, kAbsolute, kRelative };
// What a causal request's prompt change does to the chunks the KV cache keeps
// (GenerationRequest::prompt_switch, docs/causal.md "Prompt changes"): kKeep, their keys and values
// stay as computed under the old prompt; kRecache, they are recomputed under the new one.
enum class PromptSwitch { kKeep, kRecache };

const char* to_string(Sampler s);          // "euler", "causal"
const char* to_string(ReferenceKind k);    // "image", "video", "audio"
const char* to_string(Keyframe k);         // "first", "last"
const char* to_string(CausalPositions p);  // "auto", "absolute", "relative"
const char* to_string(PromptSwitch p);     // "keep", "recache"

// Each the value whose to_string is `name`; any other name throws h3::Error(kInvalidArgument)
// naming it and the names there are: "sampler 'dpm' is not known: use \"euler\" (...) or
// \"causal\" (...)".
Sampler parse_sampler(const std::string& name);
ReferenceKind parse_reference_kind(const std::string& name);
Keyframe parse_keyframe(const std::string& name);
CausalPositions parse_causal_positions(const std::string& name);
PromptSwitch parse_prompt_switch(const std::string& name);

}  // namespace h3
