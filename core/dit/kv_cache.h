// The chunk-causal DiT's key/value cache (docs/causal.md "KV cache"): per layer, the rotated
// keys (after the per-head q/k RMSNorm and RoPE at the rows' positions; with relative positions
// the window's keys are turned back as the stream advances, move_window) and the raw values of the committed
// records, in the compute dtype, this rank's heads only. Record 0 is the text prefill, record j the j-th
// committed media chunk. After the n-th commit it retains records [0, sink) and [max(sink, n - window), n):
// the text and the first chunks pinned, a window of the most recent ones (no window: nothing is evicted), so
// it holds at most sink + window records however long the stream.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

namespace h3::dit {

// Where the prompt's record sits (KvCache::placed): at no chunk. Not -1, which relative
// positions may give a window chunk moved before the clip's start.
inline constexpr int64_t kPromptPlace = std::numeric_limits<int64_t>::min();

class KvCache {
 public:
  // `layers` transformer blocks; sink >= 1 (the text is record 0); window >= 0 or none.
  // Throws h3::Error(kInvalidArgument) otherwise.
  KvCache(int64_t layers, int64_t sink, std::optional<int64_t> window);

  int64_t layers() const { return static_cast<int64_t>(k_.size()); }
  int64_t sink() const { return sink_; }
  std::optional<int64_t> window() const { return window_; }

  // The retained keys and values of `layer` [rows(), heads_local, D], records in time order
  // (undefined while empty).
  const at::Tensor& keys(int64_t layer) const { return k_[static_cast<size_t>(layer)]; }
  const at::Tensor& values(int64_t layer) const { return v_[static_cast<size_t>(layer)]; }

  // Appends one record (one tensor per layer, all with the same rows) and evicts what the
  // policy no longer retains, every layer at once. `placed`: the chunk whose positions its keys
  // were rotated at (kPromptPlace: the prompt's).
  void commit(std::vector<at::Tensor> keys, std::vector<at::Tensor> values, int64_t placed = kPromptPlace);

  int64_t committed() const { return committed_; }  // records committed so far
  // Whether the next record committed would be retained (false with window 0 once the sink is
  // full: a commit forward then changes nothing and may be skipped).
  bool retains_next() const { return committed_ < sink_ || !window_ || *window_ > 0; }
  // Puts keys and values (any rows) in the place of record 0, the prompt's (a prompt change);
  // the other records stay. Throws h3::Error(kInternal) when nothing was committed yet.
  void replace_first(std::vector<at::Tensor> keys, std::vector<at::Tensor> values);
  // Counts a record that would be evicted as soon as committed (!retains_next()), without
  // computing it.
  void commit_dropped();
  // The retained records' numbers (0 = the text, j = media chunk j - 1), in time order.
  const std::vector<int64_t>& records() const { return ids_; }
  // Each retained record's rows, and the chunk whose positions its keys sit at (kPromptPlace: the prompt):
  // its own chunk, or with relative positions that chunk moved back (move_window).
  const std::vector<int64_t>& record_rows() const { return rows_; }
  const std::vector<int64_t>& placed() const { return placed_; }
  // Relative positions: the records past the sink (the window) move `chunks` chunks back: every
  // layer's keys of their rows become turn(those keys) (the same shape), their values stay.
  void move_window(int64_t chunks, const std::function<at::Tensor(const at::Tensor&)>& turn);
  // A prompt switch's recache: every layer's keys and values of the retained records become
  // `rebuilt`'s, which holds the same records' rows in the same order (recomputed under a new
  // prompt); which records are retained, and where, stays. Throws h3::Error(kInternal) when the
  // rows differ.
  void take_keys_values(KvCache&& rebuilt);
  int64_t rows() const;   // retained rows
  int64_t bytes() const;  // bytes of every layer's retained keys and values

 private:
  int64_t sink_;
  std::optional<int64_t> window_;
  std::vector<at::Tensor> k_, v_;  // per layer, retained records concatenated
  std::vector<int64_t> ids_;       // retained records
  std::vector<int64_t> rows_;      // rows of each retained record
  std::vector<int64_t> placed_;    // the chunk each retained record's keys sit at (kPromptPlace: the prompt)
  int64_t committed_ = 0;
};

}  // namespace h3::dit
