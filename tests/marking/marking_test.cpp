// The marking library (marking/): the record's JSON and its refusals, the XMP packet and its
// escaping, the one-line title, the model hash against coreutils, and the MP4 box walk.
#include <glib.h>
#include <glib/gstdio.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "../temp_dir.h"
#include "h3/error.h"
#include "marking/model_digest.h"
#include "marking/record.h"
#include "marking/xmp.h"

namespace {

using h3::marking::Record;

Record sample_record() {
  Record r;
  r.generator = "gst-h3 0.2";
  r.element = "h3src";
  r.model_name = "tiny";
  r.model_sha256 = std::string(64, 'a');
  r.prompt = "a red <circle> & \"square\"\nsecond line";
  r.seed = 18446744073709551615ull;
  r.sampler = "causal";
  r.width = 80;
  r.height = 48;
  r.num_frames = 56;
  r.steps = 4;
  r.fps_n = 24;
  r.fps_d = 1;
  r.sink = 2;
  r.window = 2;
  r.positions = "relative";
  r.prompt_switch = "recache";
  r.device = "cpu";
  r.audio = true;
  r.changes.push_back({2, 34, 34.0 / 24, "a blue square"});
  return r;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const h3::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MarkingRecord, JsonKeepsEveryFieldExactly) {
  const Record r = sample_record();
  const Record back = h3::marking::record_from_json(h3::marking::to_json(r), "test");
  EXPECT_EQ(back.prompt, r.prompt);
  EXPECT_EQ(back.seed, r.seed);
  EXPECT_EQ(back.sampler, "causal");
  EXPECT_EQ(back.num_frames, 56);
  EXPECT_EQ(back.fps_n, 24);
  EXPECT_TRUE(back.audio);
  EXPECT_EQ(back.positions, "relative");
  EXPECT_EQ(back.prompt_switch, "recache");
  ASSERT_EQ(back.changes.size(), 1u);
  EXPECT_EQ(back.changes[0].chunk, 2);
  EXPECT_EQ(back.changes[0].first_frame, 34);
  EXPECT_EQ(back.changes[0].prompt, "a blue square");
  EXPECT_EQ(h3::marking::to_json(back), h3::marking::to_json(r));
}

// A record written before positions and prompt_switch existed is read as what its stream had:
// absolute positions, the kept chunks carried over.
TEST(MarkingRecord, ARecordWithoutPositionsReadsAsAbsoluteAndKeep) {
  std::string json = h3::marking::to_json(sample_record());
  for (const std::string key : {"\"positions\":\"relative\",", "\"prompt_switch\":\"recache\","}) {
    const auto at = json.find(key);
    ASSERT_NE(at, std::string::npos) << key << " in " << json;
    json.erase(at, key.size());
  }
  const Record back = h3::marking::record_from_json(json, "old.mp4");
  EXPECT_EQ(back.positions, "absolute");
  EXPECT_EQ(back.prompt_switch, "keep");
}

TEST(MarkingRecord, AMissingOrMistypedFieldIsNamed) {
  std::string json = h3::marking::to_json(sample_record());
  const auto at = json.find("\"seed\"");
  ASSERT_NE(at, std::string::npos);
  std::string no_seed = json;
  no_seed.replace(at, 6, "\"sEed\"");
  EXPECT_EQ(error_of([&] { h3::marking::record_from_json(no_seed, "clip.mp4"); }),
            "clip.mp4: the h3 record has no field 'seed'");
  std::string bad_model = json;
  bad_model.replace(bad_model.find("\"sha256\":\"aaaa"), 10 + 64 + 1, "\"sha256\":1");
  EXPECT_EQ(error_of([&] { h3::marking::record_from_json(bad_model, "clip.mp4"); }),
            "clip.mp4: the h3 record's field 'model.sha256' is not of the expected type (1)");
  EXPECT_EQ(error_of([&] { h3::marking::record_from_json("{\"version\": 2}", "clip.mp4"); }),
            "clip.mp4: h3 record version 2 (this build reads version 1)");
  EXPECT_EQ(error_of([&] {
              h3::marking::record_from_json("{", "clip.mp4");
            }).rfind("clip.mp4: the h3 record is not JSON", 0),
            0u);
}

TEST(MarkingRecord, OneLineCutsAtTheFirstLineBreakOrOnACharacterBoundary) {
  EXPECT_EQ(h3::marking::one_line("short", 255), "short");
  EXPECT_EQ(h3::marking::one_line("first\nsecond", 255), "first\xE2\x80\xA6");
  // 'é' is two bytes: a cut at 5 bytes falls inside the third one and steps back.
  EXPECT_EQ(h3::marking::one_line("\xC3\xA9\xC3\xA9\xC3\xA9", 5), "\xC3\xA9\xC3\xA9\xE2\x80\xA6");
  const std::string long_prompt(10000, 'x');
  const std::string title = h3::marking::one_line(long_prompt, 255);
  EXPECT_EQ(title.size(), 255u + 3u);
  EXPECT_EQ(title.substr(0, 255), std::string(255, 'x'));
}

TEST(MarkingRecord, PromptInformationListsEveryPromptWithItsChunk) {
  EXPECT_EQ(h3::marking::prompt_information(sample_record()),
            "a red <circle> & \"square\"\nsecond line\nfrom 1.417 s (chunk 2): a blue square");
}

TEST(MarkingXmp, ThePacketCarriesIptcFieldsAndTheRecordBackExactly) {
  Record r = sample_record();
  r.changes[0].prompt = std::string("bad utf-8 \xFF here");
  const std::string x = h3::marking::to_xmp(r);
  EXPECT_NE(x.find("<Iptc4xmpExt:DigitalSourceType>http://cv.iptc.org/newscodes/digitalsourcetype/"
                   "trainedAlgorithmicMedia</Iptc4xmpExt:DigitalSourceType>"),
            std::string::npos);
  EXPECT_NE(x.find("a red &lt;circle&gt; &amp; &quot;square&quot;\nsecond line"), std::string::npos);
  EXPECT_TRUE(h3::marking::has_record(x));
  const Record back = h3::marking::record_from_xmp(x, "test");
  EXPECT_EQ(back.prompt, r.prompt);
  // JSON replaced the invalid byte (U+FFFD): what the packet holds is valid UTF-8.
  EXPECT_EQ(back.changes[0].prompt, "bad utf-8 \xEF\xBF\xBD here");
  EXPECT_FALSE(h3::marking::has_record("<x:xmpmeta xmlns:x=\"adobe:ns:meta/\"></x:xmpmeta>"));
  EXPECT_EQ(error_of([&] {
              h3::marking::record_from_xmp("<a><b></a>", "f.mp4");
            }).rfind("f.mp4: the XMP packet is not XML: ", 0),
            0u);
}

TEST(MarkingXmp, TheUuidBoxIsFoundAmongTopLevelBoxesAndACutFileIsRefused) {
  const std::string packet = h3::marking::to_xmp(sample_record());
  const std::string box = h3::marking::xmp_uuid_box(packet);
  ASSERT_EQ(box.size(), 24 + packet.size());
  EXPECT_EQ(static_cast<unsigned char>(box[0]) << 24 | static_cast<unsigned char>(box[1]) << 16 |
                static_cast<unsigned char>(box[2]) << 8 | static_cast<unsigned char>(box[3]),
            static_cast<int>(box.size()));
  // ftyp (16 bytes), a free box, then the XMP box, then another uuid box that is not XMP's.
  std::string file(
      "\0\0\0\x10"
      "ftypisom\0\0\0\0",
      16);
  file += std::string(
      "\0\0\0\x08"
      "free",
      8);
  file += box;
  file += std::string(
              "\0\0\0\x18"
              "uuid",
              8) +
          std::string(16, '\x11');
  const h3::test::TempDir dir("marking");
  const std::string path = dir / "boxes.mp4";
  std::ofstream(path, std::ios::binary) << file;
  const auto packets = h3::marking::mp4_xmp_packets(path);
  ASSERT_EQ(packets.size(), 1u);
  EXPECT_EQ(packets[0], packet);
  std::ofstream(path, std::ios::binary) << file.substr(0, file.size() - 4);
  EXPECT_EQ(error_of([&] { h3::marking::mp4_xmp_packets(path); }),
            path + ": not an MP4 file (the box at byte " + std::to_string(24 + box.size()) +
                " claims 24 bytes, 20 are left)");
  g_unlink(path.c_str());
  EXPECT_EQ(error_of([&] { h3::marking::mp4_xmp_packets(path); }), path + ": cannot be read");
}

std::string run(const std::string& command) {
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[256];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    pclose(p);
  }
  return out;
}

TEST(MarkingDigest, TheModelHashIsCoreutilsSha256sumOfTheSortedWeightFiles) {
  const h3::test::TempDir tmp("marking");
  const std::string dir = tmp / "model";
  g_mkdir_with_parents((dir + "/vae").c_str(), 0755);
  g_mkdir_with_parents((dir + "/transformer").c_str(), 0755);
  std::ofstream(dir + "/vae/diffusion_pytorch_model.safetensors") << "vae weights";
  std::ofstream(dir + "/transformer/a.safetensors") << "dit part a";
  std::ofstream(dir + "/transformer/b.safetensors") << "dit part b";
  std::ofstream(dir + "/model_index.json") << "{}";  // not hashed
  const std::string coreutils =
      run("cd '" + dir +
          "' && find . -name '*.safetensors' -printf '%P\\n' | LC_ALL=C sort | xargs -d '\\n' sha256sum | "
          "sha256sum | cut -c1-64");
  ASSERT_EQ(coreutils.size(), 65u) << coreutils;
  const std::string digest = h3::marking::model_sha256(dir);
  EXPECT_EQ(digest + "\n", coreutils);
  // A config changes nothing; a weight does (and the cache sees the new size).
  std::ofstream(dir + "/model_index.json") << "{\"changed\": true}";
  EXPECT_EQ(h3::marking::model_sha256(dir), digest);
  std::ofstream(dir + "/transformer/b.safetensors") << "dit part b, retrained";
  EXPECT_NE(h3::marking::model_sha256(dir), digest);
  EXPECT_EQ(error_of([&] { h3::marking::model_sha256(dir + "/nowhere"); }),
            "model hash: " + dir + "/nowhere is neither a folder nor a .safetensors file");
}

}  // namespace
