#include "dit/adaln_tables.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "common/fused_linear.h"
#include "dit/layers.h"
#include "h3/error.h"

namespace h3::dit {

TimestepSet timestep_set(float a, float b) {
  if (a == b) return {a};
  return a < b ? TimestepSet{a, b} : TimestepSet{b, a};
}

std::string describe(const TimestepSet& s) {
  std::string out = "{";
  for (size_t i = 0; i < s.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.4f", i ? ", " : "", static_cast<double>(s[i]));
    out += buf;
  }
  return out + "}";
}

AdalnTables::Key AdalnTables::key_of(const float* t, size_t n) {
  Key k(n);
  for (size_t i = 0; i < n; ++i) std::memcpy(&k[i], &t[i], sizeof(float));
  return k;
}

AdalnTables AdalnTables::compute(const DitWeights& w, const DitConfig& c,
                                 const std::vector<TimestepSet>& sets) {
  if (!w.norm_out_linear.weight.defined()) {
    throw Error(ErrorKind::kInternal, "AdaLN tables: the AdaLN projections are not resident");
  }
  const auto dev = w.proj_in.weight.device();
  AdalnTables out;
  for (const auto& set : sets) {
    if (set.empty() || !std::is_sorted(set.begin(), set.end()) ||
        std::adjacent_find(set.begin(), set.end()) != set.end()) {
      throw Error(ErrorKind::kInvalidArgument, "AdaLN tables: the timesteps " + describe(set) +
                                                   " are not one evaluation's distinct "
                                                   "timesteps (ascending, each once)");
    }
    Key key = key_of(set.data(), set.size());
    if (out.entries_.count(key)) continue;
    Entry e;
    e.timesteps = at::tensor(at::ArrayRef<float>(set), at::kFloat);
    // Exactly the forward's operations on the same M timesteps (layers.cpp modulation()), the
    // adapters left out: they are added at use.
    e.silu_temb = at::silu(time_embedding(w, e.timesteps.to(dev), c.freq_dim));
    std::vector<at::Tensor> rows;
    rows.reserve(w.blocks.size());
    for (const auto& b : w.blocks) {
      const auto x = e.silu_temb.to(b.adaln.weight.scalar_type());
      rows.push_back(h3::linear(x, b.adaln.weight, b.adaln.bias));
    }
    e.block_rows = at::stack(rows, 1);
    const auto& f = w.norm_out_linear;
    e.final_rows = h3::linear(e.silu_temb.to(f.weight.scalar_type()), f.weight, f.bias);
    out.entries_.emplace(std::move(key), std::move(e));
  }
  return out;
}

const AdalnTables::Entry* AdalnTables::find(const at::Tensor& uniq) const {
  const auto t = uniq.to(at::kCPU, at::kFloat).contiguous();
  const auto it = entries_.find(key_of(t.data_ptr<float>(), static_cast<size_t>(t.numel())));
  return it == entries_.end() ? nullptr : &it->second;
}

bool AdalnTables::covers(const std::vector<TimestepSet>& sets) const {
  return std::all_of(sets.begin(), sets.end(),
                     [&](const TimestepSet& s) { return entries_.count(key_of(s.data(), s.size())) > 0; });
}

int64_t AdalnTables::bytes() const {
  int64_t n = 0;
  for (const auto& [k, e] : entries_) {
    n += static_cast<int64_t>(e.block_rows.nbytes() + e.final_rows.nbytes() + e.silu_temb.nbytes() +
                              e.timesteps.nbytes());
  }
  return n;
}

std::vector<TimestepSet> AdalnTables::sets() const {
  std::vector<TimestepSet> out;
  for (const auto& [k, e] : entries_) {
    TimestepSet s(k.size());
    for (size_t j = 0; j < k.size(); ++j) std::memcpy(&s[j], &k[j], sizeof(float));
    out.push_back(std::move(s));
  }
  return out;
}

std::string AdalnTables::describe_sets(size_t at_most) const {
  const auto all = sets();
  std::string out;
  for (size_t i = 0; i < all.size() && i < at_most; ++i) out += (i ? ", " : "") + describe(all[i]);
  return all.size() > at_most ? out + ", ..." : out;
}

int64_t adaln_table_bytes(const DitConfig& c, const std::vector<TimestepSet>& sets, int tp, int row_bytes) {
  std::set<TimestepSet> distinct(sets.begin(), sets.end());
  int64_t rows = 0;
  for (const auto& s : distinct) rows += static_cast<int64_t>(s.size());
  const int64_t per_row = c.num_layers * (c.adaln_width() / tp) * row_bytes +
                          c.final_adaln_width() * row_bytes + c.time_embed_dim * 4 + 4;
  return rows * per_row;
}

}  // namespace h3::dit
