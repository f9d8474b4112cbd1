// Keyframes onto the canvas against Pillow and diffusers (tests/data/keyframes, made by
// bench/reference/keyframes/make_vectors.py): Pillow 13's LANCZOS resize byte for byte (down, up, one
// axis, extreme ratios, identity, 1 x 1; both pass orders), the keyframes diffusers' MiniMaxH3ResizeStep
// puts onto the canvas (the anchor stretched, the follower cover-cropped), the canvases of diffusers'
// resolve_canvas_size, the aspect ratios it refuses, and crops outside the picture.
#include "image/keyframes.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "h3/error.h"
#include "image/resample.h"
#include "io/safetensors.h"

namespace {

using h3::image::Rgb8;

std::string data(const std::string& rel) {
  const char* root = std::getenv("H3_TEST_DATA");
  return std::string(root ? root : "tests/data") + "/keyframes/" + rel;
}

nlohmann::json read_json(const std::string& rel) {
  std::ifstream in(data(rel));
  if (!in) throw std::runtime_error("cannot read " + data(rel));
  return nlohmann::json::parse(in);
}

// A uint8 [H, W, 3] tensor as a picture.
Rgb8 to_rgb8(const at::Tensor& t) {
  if (t.scalar_type() != at::kByte || t.dim() != 3 || t.size(2) != 3) {
    throw std::runtime_error("not a uint8 [H, W, 3] picture");
  }
  const at::Tensor c = t.contiguous();
  const uint8_t* p = c.data_ptr<uint8_t>();
  return Rgb8{c.size(1), c.size(0), std::vector<uint8_t>(p, p + c.numel())};
}

// Empty when `got` is `want` byte for byte, else what differs.
std::string difference(const Rgb8& got, const at::Tensor& want_tensor) {
  const Rgb8 want = to_rgb8(want_tensor);
  std::ostringstream m;
  if (got.width != want.width || got.height != want.height || got.rgb.size() != want.rgb.size()) {
    m << "got " << got.width << "x" << got.height << " (" << got.rgb.size() << " bytes), want " << want.width
      << "x" << want.height;
    return m.str();
  }
  int64_t count = 0, max_diff = 0, first = -1;
  for (size_t i = 0; i < got.rgb.size(); ++i) {
    const int64_t d = std::abs(int64_t(got.rgb[i]) - int64_t(want.rgb[i]));
    if (d == 0) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    ++count;
    max_diff = std::max(max_diff, d);
  }
  if (count == 0) return "";
  const int64_t px = first / 3;
  m << count << " of " << got.rgb.size() << " bytes differ, max difference " << max_diff << " (first at row "
    << px / got.width << ", column " << px % got.width << ", channel " << first % 3 << ")";
  return m.str();
}

class KeyframesData : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cases_ = new nlohmann::json(read_json("cases.json"));
    pictures_ = h3::io::SafetensorsFile::open(data("pictures.safetensors"));
  }
  static void TearDownTestSuite() {
    delete cases_;
    cases_ = nullptr;
    pictures_.reset();
  }
  static Rgb8 picture(const std::string& name) { return to_rgb8(pictures_->view(name)); }

  static nlohmann::json* cases_;
  static std::shared_ptr<const h3::io::SafetensorsFile> pictures_;
};
nlohmann::json* KeyframesData::cases_ = nullptr;
std::shared_ptr<const h3::io::SafetensorsFile> KeyframesData::pictures_;

TEST_F(KeyframesData, ResizeMatchesPillow) {
  const auto want = h3::io::SafetensorsFile::open(data("resize.safetensors"));
  const auto& cases = (*cases_)["resize"];
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string name = c["name"].get<std::string>(), pic = c["picture"].get<std::string>();
    const int64_t width = c["width"].get<int64_t>(), height = c["height"].get<int64_t>();
    // passes: the order Pillow took ("hv": horizontal first, "vh": vertical first, "either", "one", "none").
    SCOPED_TRACE(name + ": " + pic + " -> " + std::to_string(width) + "x" + std::to_string(height) +
                 ", Pillow's passes " + c["passes"].get<std::string>());
    const Rgb8 got = h3::image::resize_lanczos(picture(pic), width, height);
    EXPECT_EQ(difference(got, want->view(name)), "");
  }
}

TEST_F(KeyframesData, ResizeStepMatchesDiffusers) {
  const auto want = h3::io::SafetensorsFile::open(data("block.safetensors"));
  const auto& cases = (*cases_)["block"];
  ASSERT_GE(cases.size(), 5u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const int64_t height = c["height"].get<int64_t>(), width = c["width"].get<int64_t>();
    if (c["requested_height"].is_null()) {
      // The canvas follows the first keyframe given (the last one when it is alone).
      const auto& anchor = c["keyframes"][0];
      const Rgb8 first = picture(anchor["picture"].get<std::string>());
      const auto canvas = h3::image::resolve_canvas(
          first.width, first.height, c["multiple"].get<int64_t>(), c["short_edge"].get<int64_t>(),
          c["max_pixels"].get<int64_t>(), anchor["anchor"].get<std::string>() + " keyframe");
      EXPECT_EQ(canvas[0], height);
      EXPECT_EQ(canvas[1], width);
    }
    const auto& keyframes = c["keyframes"];
    for (size_t i = 0; i < keyframes.size(); ++i) {
      const auto& k = keyframes[i];
      const std::string tensor = k["tensor"].get<std::string>(), pic = k["picture"].get<std::string>();
      SCOPED_TRACE(
          tensor + " (" + k["mode"].get<std::string>() + " of " + pic +
          (k.contains("passes") ? ", Pillow's passes " + k["passes"].get<std::string>() : std::string()) +
          ")");
      const Rgb8 src = picture(pic);
      const Rgb8 got =
          i == 0 ? h3::image::stretch_onto(src, width, height) : h3::image::cover_onto(src, width, height);
      EXPECT_EQ(difference(got, want->view(tensor)), "");
    }
  }
}

TEST(KeyframesCanvas, MatchesDiffusers) {
  const auto canvas = read_json("canvas.json");
  ASSERT_GE(canvas["cases"].size(), 15u);
  for (const auto& c : canvas["cases"]) {
    SCOPED_TRACE(c.dump());
    const auto hw = h3::image::resolve_canvas(
        c["aspect_width"].get<int64_t>(), c["aspect_height"].get<int64_t>(), c["multiple"].get<int64_t>(),
        c["short_edge"].get<int64_t>(), c["max_pixels"].get<int64_t>(), "picture");
    EXPECT_EQ(hw[0], c["height"].get<int64_t>());
    EXPECT_EQ(hw[1], c["width"].get<int64_t>());
  }
}

TEST(KeyframesCanvas, RefusesWhatDiffusersRefuses) {
  const auto canvas = read_json("canvas.json");
  ASSERT_GE(canvas["refused"].size(), 2u);
  for (const auto& c : canvas["refused"]) {
    SCOPED_TRACE(c.dump());
    try {
      h3::image::resolve_canvas(c["aspect_width"].get<int64_t>(), c["aspect_height"].get<int64_t>(), 32, 768,
                                768 * 1344, "the last keyframe");
      ADD_FAILURE() << "no h3::Error thrown";
    } catch (const h3::Error& e) {
      EXPECT_EQ(e.kind(), h3::ErrorKind::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("the last keyframe"), std::string::npos) << e.what();
    }
  }
}

TEST(KeyframesCrop, TakesTheRectangle) {
  Rgb8 p{4, 3, {}};
  for (int i = 0; i < 4 * 3 * 3; ++i) p.rgb.push_back(static_cast<uint8_t>(i));
  const Rgb8 c = h3::image::crop(p, 1, 1, 2, 2);
  ASSERT_EQ(c.width, 2);
  ASSERT_EQ(c.height, 2);
  // Row 1, columns 1..2 and row 2, columns 1..2 (3 bytes a pixel, 12 a row).
  EXPECT_EQ(c.rgb, (std::vector<uint8_t>{15, 16, 17, 18, 19, 20, 27, 28, 29, 30, 31, 32}));
  EXPECT_EQ(h3::image::crop(p, 0, 0, 4, 3).rgb, p.rgb);
}

TEST(KeyframesCrop, OutOfRangeThrows) {
  const Rgb8 p{4, 3, std::vector<uint8_t>(4 * 3 * 3, 7)};
  const struct {
    int64_t left, top, width, height;
  } bad[] = {{-1, 0, 2, 2}, {0, -1, 2, 2}, {3, 0, 2, 1}, {0, 2, 1, 2}, {0, 0, 5, 3},
             {0, 0, 4, 4},  {0, 0, 0, 1},  {0, 0, 1, 0}, {4, 0, 1, 1}, {0, 3, 1, 1}};
  for (const auto& r : bad) {
    SCOPED_TRACE(std::to_string(r.left) + "," + std::to_string(r.top) + " " + std::to_string(r.width) + "x" +
                 std::to_string(r.height));
    try {
      h3::image::crop(p, r.left, r.top, r.width, r.height);
      ADD_FAILURE() << "no exception thrown";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("crop"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
