// `h3 decode-audio` end to end: the golden rows through the command line, both tensor names,
// both output kinds, and its errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "../../temp_dir.h"
#include "../cli_run.h"
#include "../wav_reader.h"
#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;
using h3::test::CliRun;
using h3::test::run_h3;

std::string golden(const std::string& rel) {
  const char* root = std::getenv("H3_TEST_DATA");
  return std::string(root ? root : "tests/data") + "/golden/h3_audio/" + rel;
}

std::string q(const fs::path& p) {
  return "'" + p.string() + "'";
}

class DecodeAudioCli : public ::testing::Test {
 protected:
  at::Tensor want() const {
    return h3::io::SafetensorsFile::open(golden("case_a8_f5.safetensors"))->view("waveform")[0];
  }
  const h3::test::TempDir tmp_{"decode-audio"};
  const fs::path dir_ = tmp_.str();
};

TEST_F(DecodeAudioCli, DecodesTheGoldenRowsToSafetensors) {
  const fs::path out = dir_ / "w.safetensors";
  const CliRun r = run_h3("decode-audio --audio-vae " + q(golden("audio_vae")) + " --rows " +
                          q(golden("case_a8_f5.safetensors")) + " --out " + q(out));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("8 latents -> 2 x 6400 samples"), std::string::npos) << r.output;
  const auto f = h3::io::SafetensorsFile::open(out.string());
  const at::Tensor w = f->view("waveform");
  ASSERT_EQ(w.scalar_type(), at::kFloat);
  ASSERT_EQ(w.sizes(), (std::vector<int64_t>{2, 6400}));
  EXPECT_LE((w - want()).abs().max().item<double>(), 1e-4);
  EXPECT_EQ(f->metadata().at("sample_rate"), "32000");
}

TEST_F(DecodeAudioCli, ReadsTheAudioTensorOfSaveLatentsAndWritesWav) {
  const fs::path rows = dir_ / "latents.safetensors";
  const at::Tensor r16 =
      h3::io::SafetensorsFile::open(golden("case_a8_f5.safetensors"))->view("latents_rows");
  h3::io::write_safetensors(rows.string(), {{"video", at::zeros({1, 24, 1, 2, 2})}, {"audio", r16}});
  for (const char* extra : {"", " --pcm16"}) {
    const fs::path out = dir_ / "clip.wav";
    const CliRun r = run_h3("decode-audio --audio-vae " + q(golden("audio_vae")) + " --rows " + q(rows) +
                            " --out " + q(out) + extra);
    ASSERT_EQ(r.code, 0) << r.output;
    const bool pcm = std::string(extra).empty() ? false : true;
    // RIFF + fmt (16 or 18) [+ fact] + data header, then 6400 stereo frames.
    EXPECT_EQ(fs::file_size(out), pcm ? 44u + 6400u * 2 * 2 : 58u + 6400u * 2 * 4) << extra;
    // Read back: the reference's waveform (in [-1, 1]), as floats or to within one PCM16 step.
    const h3::test::Wav w = h3::test::read_wav(out.string());
    EXPECT_EQ(w.format, pcm ? 1 : 3);
    EXPECT_EQ(w.channels, 2);
    EXPECT_EQ(w.rate, 32000);
    ASSERT_EQ(w.samples.sizes(), (std::vector<int64_t>{2, 6400})) << extra;
    const double d = (w.samples - want()).abs().max().item<double>();
    EXPECT_LE(d, pcm ? 1.0 / 32768 + 1e-4 : 1e-4) << extra;
  }
}

TEST_F(DecodeAudioCli, UsageAndInputErrors) {
  CliRun r = run_h3("decode-audio --rows x --out y");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--audio-vae"), std::string::npos) << r.output;
  r = run_h3("decode-audio --audio-vae " + q(golden("audio_vae")) + " --rows " +
             q(golden("case_a8_f5.safetensors")) + " --out " + q(dir_ / "x.safetensors") + " --pcm16");
  EXPECT_EQ(r.code, 2) << r.output;
  r = run_h3("decode-audio --audio-vae /no/such/vae --rows " + q(golden("case_a8_f5.safetensors")) +
             " --out " + q(dir_ / "x.safetensors"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("/no/such/vae"), std::string::npos) << r.output;
  // A safetensors file without audio rows, and one whose rows have the wrong width.
  const fs::path none = dir_ / "none.safetensors", bad = dir_ / "bad.safetensors";
  h3::io::write_safetensors(none.string(), {{"video", at::zeros({2, 2})}});
  h3::io::write_safetensors(bad.string(), {{"audio", at::zeros({16, 24})}});
  r = run_h3("decode-audio --audio-vae " + q(golden("audio_vae")) + " --rows " + q(none) + " --out " +
             q(dir_ / "x.safetensors"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(none.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("latents_rows"), std::string::npos) << r.output;
  r = run_h3("decode-audio --audio-vae " + q(golden("audio_vae")) + " --rows " + q(bad) + " --out " +
             q(dir_ / "x.safetensors"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(bad.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[16, 24]"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "x.safetensors"));
}

}  // namespace
