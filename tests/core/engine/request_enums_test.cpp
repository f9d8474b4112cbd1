// The closed sets of a request (h3/request_enums.h): each name reads back as its value, and
// any other name is refused with the message users have always seen.
#include "h3/request_enums.h"

#include <gtest/gtest.h>

#include <string>

#include "h3/error.h"

namespace h3 {
namespace {

TEST(RequestEnums, EachValueHasItsNameAndReadsBack) {
  EXPECT_STREQ(to_string(Sampler::kEuler), "euler");
  EXPECT_STREQ(to_string(Sampler::kCausal), "causal");
  EXPECT_STREQ(to_string(ReferenceKind::kImage), "image");
  EXPECT_STREQ(to_string(ReferenceKind::kVideo), "video");
  EXPECT_STREQ(to_string(ReferenceKind::kAudio), "audio");
  EXPECT_STREQ(to_string(Keyframe::kFirst), "first");
  EXPECT_STREQ(to_string(Keyframe::kLast), "last");
  for (Sampler s : {Sampler::kEuler, Sampler::kCausal}) EXPECT_EQ(parse_sampler(to_string(s)), s);
  for (ReferenceKind k : {ReferenceKind::kImage, ReferenceKind::kVideo, ReferenceKind::kAudio}) {
    EXPECT_EQ(parse_reference_kind(to_string(k)), k);
  }
  for (Keyframe k : {Keyframe::kFirst, Keyframe::kLast}) EXPECT_EQ(parse_keyframe(to_string(k)), k);
  EXPECT_STREQ(to_string(CausalPositions::kAuto), "auto");
  EXPECT_STREQ(to_string(CausalPositions::kAbsolute), "absolute");
  EXPECT_STREQ(to_string(CausalPositions::kRelative), "relative");
  EXPECT_STREQ(to_string(PromptSwitch::kKeep), "keep");
  EXPECT_STREQ(to_string(PromptSwitch::kRecache), "recache");
  for (CausalPositions p : {CausalPositions::kAuto, CausalPositions::kAbsolute, CausalPositions::kRelative}) {
    EXPECT_EQ(parse_causal_positions(to_string(p)), p);
  }
  for (PromptSwitch p : {PromptSwitch::kKeep, PromptSwitch::kRecache})
    EXPECT_EQ(parse_prompt_switch(to_string(p)), p);
}

TEST(RequestEnums, AnUnknownNameIsRefusedWithTheNamesThereAre) {
  const auto refusal = [](auto parse, const std::string& name) -> std::string {
    try {
      parse(name);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
      return e.what();
    }
    return "'" + name + "' was taken";
  };
  EXPECT_EQ(refusal(parse_sampler, "dpm"),
            "sampler 'dpm' is not known: use \"euler\" (the whole clip, the release's sampler) or \"causal\" "
            "(chunk-causal streaming synthesis)");
  // Names are exact: neither another case nor an empty name is a sampler.
  EXPECT_EQ(refusal(parse_sampler, "Euler").rfind("sampler 'Euler' is not known", 0), 0u);
  EXPECT_EQ(refusal(parse_sampler, "").rfind("sampler '' is not known", 0), 0u);
  EXPECT_EQ(refusal(parse_reference_kind, "mask"),
            "reference kind 'mask' is not known: \"image\", \"video\" or \"audio\"");
  EXPECT_EQ(refusal(parse_keyframe, "middle"), "keyframe 'middle' is not known: \"first\" or \"last\"");
  EXPECT_EQ(refusal(parse_causal_positions, "rope"),
            "positions 'rope' is not known: \"auto\" (relative for an endless stream, absolute for a clip), "
            "\"absolute\" or \"relative\"");
  EXPECT_EQ(refusal(parse_prompt_switch, "drop"),
            "prompt-switch 'drop' is not known: \"keep\" (the kept chunks carry over as they were) or "
            "\"recache\" (they are recomputed under the new prompt)");
}

}  // namespace
}  // namespace h3
