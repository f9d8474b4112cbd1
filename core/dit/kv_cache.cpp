#include "dit/kv_cache.h"

#include <ATen/ATen.h>

#include <numeric>
#include <string>
#include <utility>

#include "h3/error.h"

namespace h3::dit {

KvCache::KvCache(int64_t layers, int64_t sink, std::optional<int64_t> window)
    : sink_(sink), window_(window), k_(static_cast<size_t>(layers)), v_(static_cast<size_t>(layers)) {
  if (sink < 1) {
    throw Error(ErrorKind::kInvalidArgument,
                "sink = " + std::to_string(sink) +
                    ": at least 1 (the text prefill is the first pinned record; 2 "
                    "also pins the first chunk)");
  }
  if (window && *window < 0) {
    throw Error(ErrorKind::kInvalidArgument, "window = " + std::to_string(*window) +
                                                 ": 0 or more recent chunks (or none: keep every chunk)");
  }
}

void KvCache::commit(std::vector<at::Tensor> keys, std::vector<at::Tensor> values, int64_t placed) {
  if (keys.size() != k_.size() || values.size() != v_.size()) {
    throw Error(ErrorKind::kInternal, "KV cache: a commit of " + std::to_string(keys.size()) +
                                          " layers into a cache of " + std::to_string(k_.size()));
  }
  const int64_t n = committed_ + 1;  // records after this commit
  ids_.push_back(committed_);
  rows_.push_back(keys.front().size(0));
  placed_.push_back(placed);
  // Which retained records survive: [0, sink) and [max(sink, n - window), n).
  std::vector<bool> keep(ids_.size());
  for (size_t i = 0; i < ids_.size(); ++i) {
    const int64_t id = ids_[i];
    keep[i] = id < sink_ || !window_ || id >= std::max(sink_, n - *window_);
  }
  for (size_t l = 0; l < k_.size(); ++l) {
    std::vector<at::Tensor> kp, vp;
    int64_t row = 0;
    for (size_t i = 0; i + 1 < ids_.size(); ++i) {
      if (keep[i]) {
        kp.push_back(k_[l].narrow(0, row, rows_[i]));
        vp.push_back(v_[l].narrow(0, row, rows_[i]));
      }
      row += rows_[i];
    }
    if (keep.back()) {
      kp.push_back(keys[l]);
      vp.push_back(values[l]);
    }
    k_[l] = kp.empty() ? at::Tensor() : at::cat(kp);
    v_[l] = vp.empty() ? at::Tensor() : at::cat(vp);
    keys[l] = at::Tensor();
    values[l] = at::Tensor();
  }
  std::vector<int64_t> ids, rows, placed_kept;
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (keep[i]) {
      ids.push_back(ids_[i]);
      rows.push_back(rows_[i]);
      placed_kept.push_back(placed_[i]);
    }
  }
  ids_ = std::move(ids);
  rows_ = std::move(rows);
  placed_ = std::move(placed_kept);
  committed_ = n;
}

void KvCache::replace_first(std::vector<at::Tensor> keys, std::vector<at::Tensor> values) {
  if (ids_.empty() || ids_.front() != 0)
    throw Error(ErrorKind::kInternal, "KV cache: no prompt record to replace");
  if (keys.size() != k_.size() || values.size() != v_.size()) {
    throw Error(ErrorKind::kInternal, "KV cache: a prompt of " + std::to_string(keys.size()) + " key and " +
                                          std::to_string(values.size()) + " value layers for a cache of " +
                                          std::to_string(k_.size()));
  }
  const int64_t old = rows_.front(), rest = rows() - old;
  for (size_t l = 0; l < k_.size(); ++l) {
    k_[l] = rest > 0 ? at::cat({keys[l], k_[l].narrow(0, old, rest)}) : keys[l];
    v_[l] = rest > 0 ? at::cat({values[l], v_[l].narrow(0, old, rest)}) : values[l];
  }
  rows_.front() = keys.front().size(0);
}

void KvCache::move_window(int64_t chunks, const std::function<at::Tensor(const at::Tensor&)>& turn) {
  int64_t sink_rows = 0;
  size_t first = 0;  // the window's first record
  while (first < ids_.size() && ids_[first] < sink_) sink_rows += rows_[first++];
  if (first == ids_.size()) return;  // no window retained (window 0)
  const int64_t window_rows = rows() - sink_rows;
  for (auto& k : k_) {
    auto window = k.narrow(0, sink_rows, window_rows);  // a view: written in place
    window.copy_(turn(window));
  }
  for (size_t i = first; i < placed_.size(); ++i) placed_[i] -= chunks;
}

void KvCache::take_keys_values(KvCache&& rebuilt) {
  if (rebuilt.rows_ != rows_ || rebuilt.k_.size() != k_.size()) {
    throw Error(ErrorKind::kInternal, "KV cache: a recache of " + std::to_string(rebuilt.rows_.size()) +
                                          " records (" + std::to_string(rebuilt.rows()) + " rows) for " +
                                          std::to_string(rows_.size()) + " (" + std::to_string(rows()) +
                                          " rows)");
  }
  k_ = std::move(rebuilt.k_);
  v_ = std::move(rebuilt.v_);
}

void KvCache::commit_dropped() {
  if (retains_next()) throw Error(ErrorKind::kInternal, "KV cache: a record the policy retains was dropped");
  ++committed_;
}

int64_t KvCache::rows() const {
  return std::accumulate(rows_.begin(), rows_.end(), int64_t{0});
}

int64_t KvCache::bytes() const {
  int64_t b = 0;
  for (size_t l = 0; l < k_.size(); ++l) {
    if (k_[l].defined()) b += k_[l].nbytes() + v_[l].nbytes();
  }
  return b;
}

}  // namespace h3::dit
