#include "h3/request_enums.h"

#include <optional>

#include "h3/error.h"

namespace h3 {
namespace {

// Each set's values and their names, written once: to_string and parse_* both read them.
template <typename Enum>
struct Named {
  Enum value;
  const char* name;
};
constexpr Named<Sampler> kSamplers[] = {{Sampler::kEuler, "euler"}, {Sampler::kCausal, "causal"}};
constexpr Named<ReferenceKind> kReferenceKinds[] = {
    {ReferenceKind::kImage, "image"}, {ReferenceKind::kVideo, "video"}, {ReferenceKind::kAudio, "audio"}};
constexpr Named<Keyframe> kKeyframes[] = {{Keyframe::kFirst, "first"}, {Keyframe::kLast, "last"}};
constexpr Named<CausalPositions> kCausalPositions[] = {{CausalPositions::kAuto, "auto"},
                                                       {CausalPositions::kAbsolute, "absolute"},
                                                       {CausalPositions::kRelative, "relative"}};
constexpr Named<PromptSwitch> kPromptSwitches[] = {{PromptSwitch::kKeep, "keep"},
                                                   {PromptSwitch::kRecache, "recache"}};

template <typename Enum, size_t N>
const char* name_of(const Named<Enum> (&names)[N], Enum value) {
  for (const Named<Enum>& n : names) {
    if (n.value == value) return n.name;
  }
  return "unknown";
}

template <typename Enum, size_t N>
std::optional<Enum> value_of(const Named<Enum> (&names)[N], const std::string& name) {
  for (const Named<Enum>& n : names) {
    if (name == n.name) return n.value;
  }
  return std::nullopt;
}

}  // namespace

const char* to_string(Sampler s) {
  return name_of(kSamplers, s);
}
const char* to_string(ReferenceKind k) {
  return name_of(kReferenceKinds, k);
}
const char* to_string(Keyframe k) {
  return name_of(kKeyframes, k);
}
const char* to_string(CausalPositions p) {
  return name_of(kCausalPositions, p);
}
const char* to_string(PromptSwitch p) {
  return name_of(kPromptSwitches, p);
}

Sampler parse_sampler(const std::string& name) {
  if (const auto s = value_of(kSamplers, name)) return *s;
  throw Error(ErrorKind::kInvalidArgument,
              "sampler '" + name +
                  "' is not known: use \"euler\" (the whole clip, the release's sampler) or \"causal\" "
                  "(chunk-causal streaming synthesis)");
}

ReferenceKind parse_reference_kind(const std::string& name) {
  if (const auto k = value_of(kReferenceKinds, name)) return *k;
  throw Error(ErrorKind::kInvalidArgument,
              "reference kind '" + name + "' is not known: \"image\", \"video\" or \"audio\"");
}

Keyframe parse_keyframe(const std::string& name) {
  if (const auto k = value_of(kKeyframes, name)) return *k;
  throw Error(ErrorKind::kInvalidArgument, "keyframe '" + name + "' is not known: \"first\" or \"last\"");
}

CausalPositions parse_causal_positions(const std::string& name) {
  if (const auto p = value_of(kCausalPositions, name)) return *p;
  throw Error(ErrorKind::kInvalidArgument,
              "positions '" + name +
                  "' is not known: \"auto\" (relative for an endless stream, absolute for a clip), "
                  "\"absolute\" or \"relative\"");
}

PromptSwitch parse_prompt_switch(const std::string& name) {
  if (const auto p = value_of(kPromptSwitches, name)) return *p;
  throw Error(ErrorKind::kInvalidArgument,
              "prompt-switch '" + name +
                  "' is not known: \"keep\" (the kept chunks carry over as they were) or \"recache\" "
                  "(they are recomputed under the new prompt)");
}

}  // namespace h3
