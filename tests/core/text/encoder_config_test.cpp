// The text encoder's config.json: the release's reads as released, and each way a config can be
// wrong is refused naming the file and the key.
#include "text/encoder_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "golden_encoder.h"
#include "h3/error.h"
#include "text/encoder_parameters.h"
#include "text_test_util.h"

namespace h3::text {
namespace {

using nlohmann::json;

json release_config() {
  std::ifstream in(test::data_dir() + "/h3-release/text_encoder/config.json");
  return json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
}

EncoderConfig parse(const json& j) {
  return EncoderConfig::parse(j.dump(), "te/config.json");
}

TEST(EncoderConfig, TheReleasesReadsAsReleased) {
  const EncoderConfig c = parse(release_config());
  EXPECT_EQ(c.num_layers, 64);
  EXPECT_EQ(c.mrope_section[0] + c.mrope_section[1] + c.mrope_section[2], c.head_dim / 2);
  EXPECT_NO_THROW(c.check_tp(8, "te/config.json"));
  // The tensors conditioning on hidden_states[50] reads: embed_tokens and 11 per layer.
  EXPECT_EQ(encoder_parameters(c, 50).size(), 1u + 50u * 11u);
}

TEST(EncoderConfig, EachWrongFieldIsRefusedNamingTheFileAndTheKey) {
  const json ok = release_config();
  auto with = [&](const std::function<void(json&)>& edit) {
    json j = ok;
    edit(j.contains("text_config") ? j["text_config"] : j);
    return j;
  };
  using test::expect_error;
  expect_error([] { EncoderConfig::parse("{", "te/config.json"); }, ErrorKind::kFormat,
               {"te/config.json", "not valid JSON"});
  expect_error([] { EncoderConfig::parse("[1]", "te/config.json"); }, ErrorKind::kFormat, {"a JSON object"});
  expect_error([] { EncoderConfig::parse("{\"text_config\": 3}", "te/config.json"); }, ErrorKind::kFormat,
               {"text_config must be an object"});
  for (const char* key :
       {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"}) {
    expect_error([&] { parse(with([&](json& t) { t.erase(key); })); }, ErrorKind::kFormat,
                 {"te/config.json", std::string("text_config.") + key, "positive integer"});
    expect_error([&] { parse(with([&](json& t) { t[key] = 0; })); }, ErrorKind::kFormat, {key});
    expect_error([&] { parse(with([&](json& t) { t[key] = "64"; })); }, ErrorKind::kFormat, {key});
  }
  expect_error([&] { parse(with([](json& t) { t["rms_norm_eps"] = -1; })); }, ErrorKind::kFormat,
               {"text_config.rms_norm_eps", "positive number"});
  expect_error([&] { parse(with([](json& t) { t["rope_theta"] = "big"; })); }, ErrorKind::kFormat,
               {"text_config.rope_theta"});
  expect_error([&] { parse(with([](json& t) { t["attention_bias"] = true; })); }, ErrorKind::kFormat,
               {"attention_bias"});
  expect_error([&] { parse(with([](json& t) {
                       t["rope_scaling"]["mrope_section"] = {24, 20};
                     })); },
               ErrorKind::kFormat, {"mrope_section must be a list of 3"});
  expect_error([&] { parse(with([](json& t) {
                       t["rope_scaling"]["mrope_section"] = {24, 20, "x"};
                     })); },
               ErrorKind::kFormat, {"mrope_section must hold integers"});
  expect_error([&] { parse(with([](json& t) {
                       t["rope_scaling"]["mrope_section"] = {24, 20, 21};
                     })); },
               ErrorKind::kFormat, {"summing to head_dim / 2"});
  expect_error([&] { parse(with([](json& t) { t["num_key_value_heads"] = 7; })); }, ErrorKind::kFormat,
               {"not a multiple of num_key_value_heads 7"});
  expect_error([&] { parse(with([](json& t) { t["head_dim"] = 127; })); }, ErrorKind::kFormat,
               {"head_dim must be even"});
  const EncoderConfig c = parse(ok);
  expect_error([&] { c.check_tp(3, "te/config.json"); }, ErrorKind::kInvalidArgument,
               {"te/config.json", "3 tensor-parallel ranks cannot split the text encoder"});
  expect_error([&] { EncoderConfig::load("/no/such/text_encoder"); }, ErrorKind::kNotFound,
               {"/no/such/text_encoder"});
}

}  // namespace
}  // namespace h3::text
