// The `h3` command line: generate (y4m read back by ffprobe / gst-discoverer, --save-latents on
// the golden run), make-tiny, inspect, encode-prompt, and their errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "../text/golden_encoder.h"
#include "../wav_reader.h"
#include "engine/model/compute_dtype.h"
#include "engine_test_util.h"
#include "golden_model.h"
#include "io/safetensors.h"

namespace h3 {
namespace {
namespace fs = std::filesystem;

struct Result {
  int code;
  std::string out;  // stdout and stderr together
};

Result sh(const std::string& cmd) {
  Result r{-1, ""};
  std::FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string h3(const std::string& args) {
  return std::string(H3_BIN) + " " + args;
}
std::string q(const std::string& s) {
  return "'" + s + "'";
}

bool have(const char* tool) {
  return sh(std::string("command -v ") + tool).code == 0;
}

TEST(Cli, GenerateWithAudioWritesTheSoundtrackAsAWav) {
  test::TempDir d("cli-audio");
  const std::string out = d / "clip.y4m", wav = d / "clip.wav";
  const Result g =
      sh(h3("generate --prompt 'a drum' --width 80 --height 48 --frames 30 --steps 3 --seed 4 --out " +
            q(out) + " --audio " + q(wav)));
  ASSERT_EQ(g.code, 0) << g.out;
  // 800 * round(30 * 5 / 3) samples per channel.
  EXPECT_THAT(g.out, ::testing::HasSubstr("wrote 40000 stereo samples (1.250 s at 32000 Hz)"));
  EXPECT_THAT(g.out, ::testing::HasSubstr("first frames after"));
  ASSERT_TRUE(fs::exists(wav));
  EXPECT_GE(fs::file_size(wav), 40000u * 2 * 4);
  // Read back: the samples the engine gives for the same request.
  const test::Wav w = test::read_wav(wav);
  EXPECT_EQ(w.format, 3);
  EXPECT_EQ(w.rate, 32000);
  ASSERT_EQ(w.samples.sizes(), (std::vector<int64_t>{2, 40000}));
  GenerationRequest r;
  r.prompt = "a drum";
  r.width = 80;
  r.height = 48;
  r.num_frames = 30;
  r.steps = 3;
  r.seed = 4;
  r.audio = true;
  test::CollectSink sink;
  StreamControl cancel;
  test::open_tiny(1)->generate(r, sink, {}, cancel);
  std::vector<at::Tensor> stretches;
  for (const auto& c : sink.audio) stretches.push_back(c.audio);
  const at::Tensor engine_audio = at::cat(stretches, 0).t();  // stretches are [samples, 2]
  ASSERT_EQ(engine_audio.sizes(), w.samples.sizes());
  EXPECT_LE((engine_audio.to(at::kFloat) - w.samples).abs().max().item<double>(), 1e-6);
  if (!have("ffprobe")) GTEST_SKIP() << "ffprobe is not installed: the WAV's header was not read back";
  const Result p =
      sh("ffprobe -v error -show_entries stream=sample_rate,channels,duration_ts "
         "-of default=noprint_wrappers=1 " +
         q(wav));
  ASSERT_EQ(p.code, 0) << p.out;
  EXPECT_THAT(p.out, ::testing::HasSubstr("sample_rate=32000"));
  EXPECT_THAT(p.out, ::testing::HasSubstr("channels=2"));
  EXPECT_THAT(p.out, ::testing::HasSubstr("duration_ts=40000"));
}

TEST(Cli, GenerateWritesAY4mThatFfprobeAndDiscovererReadBack) {
  test::TempDir d("cli");
  const std::string out = d / "clip.y4m";
  const std::string cmd =
      h3("generate --prompt 'a small test' --width 80 --height 48 --frames 30 --steps 3 --seed 9 "
         "--ranks 2 --out " +
         q(out) + " --save-latents " + q(d / "lat.safetensors"));
  const Result g = sh(cmd);
  ASSERT_EQ(g.code, 0) << g.out;
  EXPECT_THAT(g.out, ::testing::HasSubstr("denoising"));  // progress, plain lines when not a terminal
  EXPECT_EQ(fs::file_size(out),
            std::string("YUV4MPEG2 W80 H48 F24:1 Ip A1:1 C444\n").size() + 30 * (6 + 3 * 80 * 48));
  const auto lat = io::SafetensorsFile::open(d / "lat.safetensors");
  EXPECT_EQ(lat->info("video").shape, (std::vector<int64_t>{1, 24, 12, 4, 6}));
  EXPECT_EQ(lat->info("audio").shape, (std::vector<int64_t>{130, 32}));

  bool checked = false;
  if (have("ffprobe")) {
    const Result p =
        sh("ffprobe -v error -count_frames -select_streams v:0 -show_entries "
           "stream=width,height,r_frame_rate,nb_read_frames -of default=noprint_wrappers=1 " +
           q(out));
    ASSERT_EQ(p.code, 0) << p.out;
    EXPECT_THAT(p.out, ::testing::HasSubstr("width=80"));
    EXPECT_THAT(p.out, ::testing::HasSubstr("height=48"));
    EXPECT_THAT(p.out, ::testing::HasSubstr("r_frame_rate=24/1"));
    EXPECT_THAT(p.out, ::testing::HasSubstr("nb_read_frames=30"));
    checked = true;
  }
  if (have("gst-discoverer-1.0")) {
    const Result p = sh("gst-discoverer-1.0 -v " + q(out));
    ASSERT_EQ(p.code, 0) << p.out;
    EXPECT_THAT(p.out, ::testing::HasSubstr("Width: 80"));
    EXPECT_THAT(p.out, ::testing::HasSubstr("Height: 48"));
    EXPECT_THAT(p.out, ::testing::HasSubstr("Frame rate: 24/1"));
    EXPECT_THAT(p.out, ::testing::HasSubstr("Duration: 0:00:01.250000000"));  // 30 frames at 24 fps
    checked = true;
  }
  if (!checked) GTEST_SKIP() << "neither ffprobe nor gst-discoverer-1.0 is installed";
}

TEST(Cli, GoldenRunSavesLatentsWithin1e4OfTheReference) {
  test::TempDir d("cli");
  const test::GoldenRun g = test::make_golden_model(d.str());
  const Result r = sh(h3("generate --model " + q(g.model_dir) + " --embeds " + q(g.embeds_path) +
                         " --width 96 --height 64 --frames 124 --steps 4 --seed 42 --quiet --out " +
                         q(d / "g.y4m") + " --save-latents " + q(d / "g.safetensors")));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto got = io::SafetensorsFile::open(d / "g.safetensors");
  const auto want = io::SafetensorsFile::open(g.expected_path);
  const double dv = (got->view("video") - want->view("video")).abs().max().item<double>();
  const double da = (got->view("audio") - want->view("audio")).abs().max().item<double>();
  std::printf("h3 generate golden run: max |video - ref| = %.3g, max |audio - ref| = %.3g\n", dv, da);
  EXPECT_LE(dv, 1e-4);
  EXPECT_LE(da, 1e-4);
}

TEST(Cli, BadInputsAreClearErrors) {
  test::TempDir d("cli");
  const std::string out = " --out " + q(d / "x.y4m");
  auto fails = [&](const std::string& args, const std::string& needle) {
    const Result r = sh(h3(args));
    EXPECT_NE(r.code, 0) << args;
    EXPECT_THAT(r.out, ::testing::HasSubstr(needle)) << args;
  };
  fails("generate --model " + q(d / "none") + " --prompt x" + out, d / "none");
  fails("generate --prompt x --steps 1" + out, "steps = 1");
  fails("generate --prompt x --width 8" + out, "width = 8");
  fails("generate --prompt x --frames 2000" + out, "frames");
  fails("generate --prompt x --ranks 3" + out, "tensor-parallel size 3 does not divide the attention heads");
  fails("generate --prompt x --bogus 1" + out, "bogus");
  fails("generate --prompt x --sampler dpm" + out,
        "h3 generate: invalid argument: sampler 'dpm' is not known: use \"euler\" (the whole clip, the "
        "release's sampler) or \"causal\" (chunk-causal streaming synthesis)");
  fails("generate --prompt x --sampler causal --positions rope" + out,
        "h3 generate: invalid argument: positions 'rope' is not known");
  fails("generate --prompt x --sampler causal --prompt-switch drop" + out,
        "h3 generate: invalid argument: prompt-switch 'drop' is not known");
  fails("generate --prompt x --positions relative" + out, "positions applies to the causal sampler");
  fails("generate --prompt x --ranks 2 --sp 3" + out, "sp-size = 3 with 2 ranks");
  fails("generate --prompt x --device-memory 1M" + out,
        "per rank as TP1\u00d7SP1 but each device has 1.0 MiB");
  fails("generate --prompt x --device-memory lots" + out, "--device-memory");
  fails("generate --prompt x --out " + q(d / "no/dir/x.y4m"), "no/dir/x.y4m");
}

// --positions absolute on a causal clip longer than the model's trained length (the tiny default's
// 48 frames: 4 chunks) prints one warning line naming where its positions leave the trained clip's;
// the default (auto: absolute for a clip, the parity layout) prints none.
TEST(Cli, AbsolutePositionsPastTheTrainedLengthAreWarnedAbout) {
  test::TempDir d("cli-positions");
  const std::string common =
      "generate --prompt 'a red ball bouncing' --sampler causal --frames 73 --width 64 "
      "--height 64 --quiet --prompt-switch recache --out " +
      q(d / "clip.y4m");
  const Result r = sh(h3(common + " --positions absolute"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out,
              ::testing::HasSubstr("h3 generate: warning: positions = absolute on a clip longer than the "
                                   "trained length: from chunk 3 (counted from 0, 2.125 s in)"));
  const Result quiet = sh(h3(common));
  ASSERT_EQ(quiet.code, 0) << quiet.out;
  EXPECT_THAT(quiet.out, ::testing::Not(::testing::HasSubstr("positions = absolute")));
}

// --prompt-timeline: the file's prompt takes over at its chunk (the CLI's latents are the engine's
// for the same timeline, and the first prompt's before that chunk); a bad or empty file is refused
// naming it, as is a timeline without the causal sampler.
TEST(Cli, GenerateTakesAPromptTimelineFileAndRefusesABadOrEmptyOne) {
  test::TempDir d("cli-timeline");
  const std::string timeline = d / "timeline.txt", lat = d / "lat.safetensors";
  std::ofstream(timeline) << "# seconds prompt\r\n0.5 a blue cube spinning\r\n";
  const std::string common =
      "generate --prompt 'a red ball bouncing' --sampler causal --frames 39 --seed 11 --out " +
      q(d / "clip.y4m");
  const Result g = sh(h3(common + " --prompt-timeline " + q(timeline) + " --save-latents " + q(lat)));
  ASSERT_EQ(g.code, 0) << g.out;
  // Chunk 1 starts at 17/24 s, the first start at or after 0.5 s.
  EXPECT_THAT(g.out, ::testing::HasSubstr("h3: prompt from chunk 1 ("));
  const at::Tensor cli = io::SafetensorsFile::open(lat)->view("video").clone();
  ASSERT_EQ(cli.sizes(), (at::IntArrayRef{1, 24, 12, 10, 16}));  // 12 latents: chunks 0, 1 and the tail

  auto engine = test::open_tiny(1);
  GenerationRequest r;
  r.prompt = "a red ball bouncing";
  r.sampler = Sampler::kCausal;
  r.num_frames = 39;
  r.seed = 11;
  auto latents = [&](const GenerationRequest& req) {
    at::Tensor video, audio;
    test::CollectSink sink;
    StreamControl cancel;
    engine->generate(req, sink, {}, cancel, test::keep_latents(&video, &audio));
    return video;
  };
  const at::Tensor plain = latents(r);
  r.prompt_timeline = {{0.5, "a blue cube spinning"}};
  const at::Tensor timed = latents(r);
  const double same = (cli - timed).abs().max().item<double>();
  const double first = (cli.narrow(2, 0, 5) - plain.narrow(2, 0, 5)).abs().max().item<double>();
  const double switched = (cli.narrow(2, 5, 7) - plain.narrow(2, 5, 7)).abs().max().item<double>();
  std::printf(
      "h3 generate --prompt-timeline: max |cli - engine| %.3g; chunk 0 vs no timeline %.3g, chunks 1-2 "
      "%.3g\n",
      same, first, switched);
  EXPECT_LE(same, 1e-5);
  EXPECT_LE(first, 1e-5);
  EXPECT_GT(switched, 1e-3);  // 0.0106 measured; 0 when the timeline is not read

  auto fails = [&](const std::string& args, const std::string& needle) {
    const Result f = sh(h3(args));
    EXPECT_NE(f.code, 0) << args;
    EXPECT_THAT(f.out, ::testing::HasSubstr(needle)) << args;
  };
  const std::string empty = d / "empty.txt", bad = d / "bad.txt";
  std::ofstream(empty) << "# nothing here yet\n\n";
  std::ofstream(bad) << "1 a red ball\n0.5 a blue cube\n";
  fails(common + " --prompt-timeline " + q(empty), empty + ": the prompt timeline has no entry");
  fails(common + " --prompt-timeline " + q(bad), bad + ":2: the time 0.5 does not follow the line before");
  fails(common + " --prompt-timeline " + q(d / "missing.txt"),
        "prompt timeline " + d / "missing.txt" + " cannot be read");
  fails("generate --prompt x --frames 39 --out " + q(d / "e.y4m") + " --prompt-timeline " + q(timeline),
        "a prompt timeline needs the causal sampler (sampler=causal)");
}

TEST(Cli, GenerateComputeDtypeBf16WritesTheClipAndAnUnknownDtypeIsRefused) {
  test::TempDir d("cli-dtype");
  const std::string req = "generate --prompt 'half precision' --width 80 --height 48 --frames 30 --steps 3 ";
  const Result bf16 = sh(h3(req + "--compute-dtype bf16 --out " + q(d / "bf16.y4m") + " --save-latents " +
                            q(d / "bf16.safetensors")));
  ASSERT_EQ(bf16.code, 0) << bf16.out;
  EXPECT_THAT(bf16.out, ::testing::HasSubstr("1 rank(s), bf16"));
  // The note on emulated bf16 is printed exactly where the CPU lacks AMX-BF16 and AVX-512-BF16.
  const bool noted = bf16.out.find("emulates the bf16") != std::string::npos;
  EXPECT_EQ(noted, !engine_detail::cpu_has_native_bf16()) << bf16.out;
  EXPECT_EQ(fs::file_size(d / "bf16.y4m"),
            std::string("YUV4MPEG2 W80 H48 F24:1 Ip A1:1 C444\n").size() + 30 * (6 + 3 * 80 * 48));
  const Result fp32 =
      sh(h3(req + "--quiet --out " + q(d / "fp32.y4m") + " --save-latents " + q(d / "fp32.safetensors")));
  ASSERT_EQ(fp32.code, 0) << fp32.out;
  EXPECT_EQ(fp32.out.find("emulates the bf16"), std::string::npos) << fp32.out;
  const auto a = io::SafetensorsFile::open(d / "fp32.safetensors");
  const auto b = io::SafetensorsFile::open(d / "bf16.safetensors");
  const double diff = (a->view("video") - b->view("video")).abs().max().item<double>();
  EXPECT_GT(diff, 0.0) << "--compute-dtype bf16 gave fp32's latents";
  EXPECT_LE(diff, 0.05);  // the engine test's bound (compute_dtype_test.cpp)

  const Result bad = sh(h3(req + "--compute-dtype fp16 --out " + q(d / "x.y4m")));
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_THAT(bad.out, ::testing::HasSubstr("compute-dtype = \"fp16\": must be \"fp32\" or \"bf16\""));
  EXPECT_FALSE(fs::exists(d / "x.y4m"));
}

TEST(Cli, MakeTinyIsDeterministicAndInspectReadsIt) {
  test::TempDir d("cli");
  ASSERT_EQ(sh(h3("make-tiny --out " + q(d / "a") + " --seed 3")).code, 0);
  ASSERT_EQ(sh(h3("make-tiny --out " + q(d / "b") + " --seed 3 --quiet")).code, 0);
  EXPECT_EQ(sh("diff -r " + q(d / "a") + " " + q(d / "b")).code, 0);
  const Result i = sh(h3("inspect " + q(d / "a") + " --tp 2"));
  ASSERT_EQ(i.code, 0) << i.out;
  EXPECT_THAT(i.out, ::testing::HasSubstr("transformer"));
  EXPECT_THAT(i.out, ::testing::HasSubstr("tp 2"));
  const Result f = sh(h3("inspect " + q(d / "a/vae/diffusion_pytorch_model.safetensors")));
  ASSERT_EQ(f.code, 0) << f.out;
  EXPECT_THAT(f.out, ::testing::HasSubstr("F32"));
}

// A folder holding only tokenizer/ (the shipped files) and, unless `ids_only`, text_encoder/ (the
// golden tiny Qwen3-VL encoder, 6 layers).
void prompt_folder(const std::string& dir, bool ids_only) {
  fs::create_directories(fs::path(dir) / "tokenizer");
  for (const auto& e : fs::directory_iterator(test::shipped_tokenizer_dir()))
    fs::copy_file(e.path(), fs::path(dir) / "tokenizer" / e.path().filename());
  if (!ids_only) test::write_golden_encoder(dir + "/text_encoder");
}

TEST(Cli, EncodePromptIdsOnlyTakesTheFilesRawBytes) {
  test::TempDir d("cli-ids");
  prompt_folder(d / "m", true);
  // The golden case with control characters and a NUL, given as the prompt file's bytes.
  std::ifstream cases(test::text_golden_dir() + "/tokenizer_cases.json");
  const auto all = nlohmann::json::parse(cases)["prompts"];
  const auto it = std::find_if(all.begin(), all.end(), [](const nlohmann::json& p) {
    return p["text"].get<std::string>().find('\0') != std::string::npos;
  });
  ASSERT_NE(it, all.end());
  const std::string prompt = (*it)["text"].get<std::string>();
  std::string want;
  for (const auto& id : (*it)["ids"]) want += (want.empty() ? "" : " ") + std::to_string(id.get<int64_t>());
  std::ofstream(d / "p.txt", std::ios::binary) << prompt;
  const Result r =
      sh(h3("encode-prompt --model " + q(d / "m") + " --prompt-file " + q(d / "p.txt") + " --ids-only"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, want + "\n");
  const Result empty = sh(h3("encode-prompt --model " + q(d / "m") + " --prompt '' --ids-only"));
  EXPECT_EQ(empty.code, 0) << empty.out;
  EXPECT_EQ(empty.out, "\n");
  std::ofstream(d / "bad.txt", std::ios::binary) << "ok \xC3\x28";
  const Result bad =
      sh(h3("encode-prompt --model " + q(d / "m") + " --prompt-file " + q(d / "bad.txt") + " --ids-only"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.out,
              ::testing::HasSubstr("prompt file " + d / "bad.txt" + ": invalid UTF-8 at byte offset 3"));
  const Result none = sh(h3("encode-prompt --model " + q(d / "none") + " --prompt x --ids-only"));
  EXPECT_EQ(none.code, 1);
  EXPECT_THAT(none.out, ::testing::HasSubstr(d / "none/tokenizer"));
}

TEST(Cli, EncodePromptWritesTheGoldenHiddenStatesAtOneAndTwoRanks) {
  test::TempDir d("cli-enc");
  prompt_folder(d / "m", false);
  const auto c = test::read_tensors(test::text_golden_dir() + "/case_tiny_h3_prompt.safetensors");
  const auto bytes = c.at("prompt_utf8");
  std::ofstream(d / "p.txt", std::ios::binary)
      .write(static_cast<const char*>(bytes.data_ptr()), static_cast<std::streamsize>(bytes.numel()));
  for (const char* ranks : {"1", "2"}) {
    const std::string out = d / (std::string("e") + ranks + ".safetensors");
    const Result r = sh(h3("encode-prompt --model " + q(d / "m") + " --prompt-file " + q(d / "p.txt") +
                           " --layer 4 --ranks " + ranks + " --out " + q(out)));
    ASSERT_EQ(r.code, 0) << r.out;
    const auto e = test::read_tensors(out);
    EXPECT_LE(test::max_abs_diff(e.at("embeds"), c.at("hidden")), 1e-4) << ranks;
    EXPECT_TRUE(at::equal(e.at("tags"), c.at("tags"))) << ranks;
  }
  // K comes from model_index.json's text_encoder_layer, else the release's 50, which this
  // 6-layer encoder does not have.
  const std::string args =
      "encode-prompt --model " + q(d / "m") + " --prompt 'a cat' --out " + q(d / "k.safetensors");
  const Result k50 = sh(h3(args));
  EXPECT_EQ(k50.code, 1);
  EXPECT_THAT(k50.out, ::testing::HasSubstr("conditioning layer K = 50 is outside 1..5"));
  EXPECT_THAT(k50.out, ::testing::HasSubstr("--layer"));
  // Given in model_index.json, that K is the one used: the hidden states after layers 0..K-1.
  const std::string from_index = "encode-prompt --model " + q(d / "m") + " --prompt-file " + q(d / "p.txt") +
                                 " --out " + q(d / "k.safetensors");
  for (int k : {4, 3}) {
    std::ofstream(d / "m/model_index.json") << "{\"text_encoder_layer\": " << k << "}";
    const Result r = sh(h3(from_index));
    ASSERT_EQ(r.code, 0) << r.out;
    const at::Tensor want = k == 4 ? c.at("hidden") : c.at("hidden_states")[k];
    EXPECT_LE(test::max_abs_diff(test::read_tensors(d / "k.safetensors").at("embeds"), want), 1e-4)
        << "K = " << k;
  }
  EXPECT_EQ(sh(h3(args)).code, 0);
  const Result empty =
      sh(h3("encode-prompt --model " + q(d / "m") + " --prompt '' --out " + q(d / "x.safetensors")));
  EXPECT_EQ(empty.code, 1);
  EXPECT_THAT(empty.out, ::testing::HasSubstr("empty"));
}

TEST(Cli, InspectShapesOfTheTextEncoder) {
  const std::string data = test::data_dir();
  // The release config: embed_tokens + layers 0..49, 11 tensors each.
  const Result r = sh(h3("inspect --shapes " + q(data + "/h3-release/text_encoder/config.json")));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::HasSubstr("64 layers, hidden 5120, 64 query / 8 key-value heads x 128"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("hidden_states[50] reads embed_tokens + layers 0..49: tensors 551, "
                                          "parameters 25157829120"));
  // The whole download, as the release index totals it (docs/h3-model.md §10.1).
  EXPECT_THAT(r.out, ::testing::HasSubstr("the whole checkpoint (language model, lm_head, vision tower): "
                                          "tensors 1058, parameters 33357390064, 66714780128 bytes in bf16"));
  // Names against an index in the release's naming (the golden tiny encoder's two-shard index).
  const std::string tiny = test::text_golden_dir() + "/text_encoder_tiny_compact";
  const Result ok = sh(h3("inspect --shapes " + q(tiny + "/config.json") + " --layer 4 --index " +
                          q(tiny + "/model.safetensors.index.json")));
  ASSERT_EQ(ok.code, 0) << ok.out;
  EXPECT_THAT(ok.out, ::testing::HasSubstr("45 of them read for hidden_states[4]: 0 missing"));
  test::TempDir d("cli-idx");
  std::ifstream in(tiny + "/model.safetensors.index.json");
  auto idx = nlohmann::json::parse(in);
  idx["weight_map"].erase("model.language_model.layers.2.mlp.up_proj.weight");
  std::ofstream(d / "index.json") << idx.dump();
  const Result missing =
      sh(h3("inspect --shapes " + q(tiny + "/config.json") + " --layer 4 --index " + q(d / "index.json")));
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.out, ::testing::HasSubstr(
                               "missing from the index: model.language_model.layers.2.mlp.up_proj.weight"));
  EXPECT_THAT(sh(h3("inspect --shapes " + q(tiny + "/config.json") + " --layer 6")).out,
              ::testing::HasSubstr("must be within 1..5"));
}

}  // namespace
}  // namespace h3
