// KvCache::replace_first (dit/kv_cache.h), what a prompt change does to the cache: the prompt's
// record takes the new prefill's rows, every chunk record the policy kept stays where it was, in
// time order, and later commits and evictions count the new rows. The reference cases of
// causal_test.cpp evict at most one record and never change the prompt; these evict several.
#include "dit/kv_cache.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "h3/error.h"

namespace h3::dit {
namespace {

constexpr int64_t kLayers = 2;

// One record of `rows` rows in every layer, each row [1 head, 2] holding `value` + 100 * layer
// (keys) or its negative (values): which record, layer and kind a row came from is readable.
std::vector<at::Tensor> record(int64_t rows, float value, float sign) {
  std::vector<at::Tensor> out;
  for (int64_t l = 0; l < kLayers; ++l) out.push_back(at::full({rows, 1, 2}, sign * (value + 100.0f * l)));
  return out;
}
void commit(KvCache& c, int64_t rows, float value) {
  c.commit(record(rows, value, 1), record(rows, value, -1));
}

// The value of every retained row of `layer`'s keys, and whether values are the keys' negatives.
std::vector<float> key_rows(const KvCache& c, int64_t layer) {
  const at::Tensor k = c.keys(layer).select(1, 0).select(1, 0).contiguous();
  EXPECT_TRUE(at::equal(c.values(layer), -c.keys(layer))) << "layer " << layer;
  EXPECT_EQ(c.keys(layer).sizes(), (at::IntArrayRef{c.rows(), 1, 2}));
  return std::vector<float>(k.data_ptr<float>(), k.data_ptr<float>() + k.numel());
}

// `n` rows of `value` + 100 * layer.
std::vector<float> rows_of(std::vector<std::pair<int64_t, float>> runs, int64_t layer) {
  std::vector<float> out;
  for (auto [n, v] : runs) out.insert(out.end(), static_cast<size_t>(n), v + 100.0f * layer);
  return out;
}

TEST(KvCacheReplaceFirst, ThePromptsRowsChangeAndTheKeptChunksStayInOrderAfterSeveralEvictions) {
  KvCache c(kLayers, 2, 2);
  // Record i has i + 1 rows of value i: the text (0), then chunks. Seven commits evict 2, 3, 4.
  for (int64_t i = 0; i < 7; ++i) commit(c, i + 1, static_cast<float>(i));
  ASSERT_EQ(c.records(), (std::vector<int64_t>{0, 1, 5, 6}));
  // A new prompt of 3 rows (the first had 1).
  c.replace_first(record(3, 50, 1), record(3, 50, -1));
  EXPECT_EQ(c.records(), (std::vector<int64_t>{0, 1, 5, 6}));
  EXPECT_EQ(c.committed(), 7);
  EXPECT_EQ(c.rows(), 3 + 2 + 6 + 7);
  for (int64_t l = 0; l < kLayers; ++l) {
    EXPECT_EQ(key_rows(c, l), rows_of({{3, 50}, {2, 1}, {6, 5}, {7, 6}}, l)) << "layer " << l;
  }
  EXPECT_EQ(c.bytes(), kLayers * 2 * (3 + 2 + 6 + 7) * 2 * 4);

  // The next commits evict chunk 5, then 6, counting the prompt's new rows.
  commit(c, 4, 7);
  EXPECT_EQ(c.records(), (std::vector<int64_t>{0, 1, 6, 7}));
  for (int64_t l = 0; l < kLayers; ++l) {
    EXPECT_EQ(key_rows(c, l), rows_of({{3, 50}, {2, 1}, {7, 6}, {4, 7}}, l)) << "layer " << l;
  }
  // A shorter prompt again (1 row), then one more commit.
  c.replace_first(record(1, 60, 1), record(1, 60, -1));
  commit(c, 2, 8);
  EXPECT_EQ(c.records(), (std::vector<int64_t>{0, 1, 7, 8}));
  EXPECT_EQ(c.rows(), 1 + 2 + 4 + 2);
  for (int64_t l = 0; l < kLayers; ++l) {
    EXPECT_EQ(key_rows(c, l), rows_of({{1, 60}, {2, 1}, {4, 7}, {2, 8}}, l)) << "layer " << l;
  }
}

TEST(KvCacheReplaceFirst, WithNothingElseRetainedThePromptIsTheWholeCache) {
  // Sink 1, window 0: every chunk is dropped unseen; the prompt alone is attended.
  KvCache c(kLayers, 1, 0);
  commit(c, 2, 0);
  for (int i = 0; i < 3; ++i) c.commit_dropped();
  ASSERT_EQ(c.committed(), 4);
  c.replace_first(record(5, 9, 1), record(5, 9, -1));
  EXPECT_EQ(c.records(), (std::vector<int64_t>{0}));
  EXPECT_EQ(c.rows(), 5);
  for (int64_t l = 0; l < kLayers; ++l) EXPECT_EQ(key_rows(c, l), rows_of({{5, 9}}, l));
}

TEST(KvCacheReplaceFirst, NoPromptRecordOrTheWrongLayersIsAnInternalError) {
  auto internal = [](const std::function<void()>& f, const std::string& want) {
    try {
      f();
      ADD_FAILURE() << "accepted: " << want;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal) << e.what();
      EXPECT_EQ(std::string(e.what()), want);
    }
  };
  KvCache empty(kLayers, 2, 2);
  internal([&] { empty.replace_first(record(1, 0, 1), record(1, 0, -1)); },
           "KV cache: no prompt record to replace");
  KvCache c(kLayers, 2, 2);
  commit(c, 1, 0);
  internal(
      [&] {
        c.replace_first({at::zeros({1, 1, 2})}, {at::zeros({1, 1, 2})});
      },
      "KV cache: a prompt of 1 key and 1 value layers for a cache of 2");
  internal(
      [&] {
        c.replace_first(record(1, 0, 1), {at::zeros({1, 1, 2})});
      },
      "KV cache: a prompt of 2 key and 1 value layers for a cache of 2");
  EXPECT_EQ(c.rows(), 1) << "a refused replacement changes nothing";
  EXPECT_EQ(key_rows(c, 1), rows_of({{1, 0}}, 1));
}

}  // namespace
}  // namespace h3::dit
