#include "io/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "h3/error.h"
#include "io/json_strict.h"

namespace h3::io {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string parent_of(const std::string& p) {
  auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : p.substr(0, slash));
}

[[noreturn]] void index_fail(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::kFormat, path + ": " + what + "; the checkpoint index is malformed");
}

// The single index or safetensors file inside a folder.
std::string resolve_folder(const std::string& dir) {
  std::vector<std::string> indexes, files;
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw Error(ErrorKind::kNotFound, dir + ": cannot read the folder");
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (ends_with(n, ".safetensors.index.json"))
      indexes.push_back(n);
    else if (ends_with(n, ".safetensors"))
      files.push_back(n);
  }
  ::closedir(d);
  std::sort(indexes.begin(), indexes.end());
  std::sort(files.begin(), files.end());
  if (indexes.size() == 1) return dir + "/" + indexes[0];
  if (indexes.size() > 1) {
    throw Error(ErrorKind::kInvalidArgument, dir + ": holds " + std::to_string(indexes.size()) +
                                                 " *.safetensors.index.json files ('" + indexes[0] + "', '" +
                                                 indexes[1] + "'); name the one to load");
  }
  if (files.size() == 1) return dir + "/" + files[0];
  if (files.empty()) {
    throw Error(ErrorKind::kNotFound, dir + ": holds no .safetensors file and no *.safetensors.index.json");
  }
  throw Error(ErrorKind::kInvalidArgument, dir + ": holds " + std::to_string(files.size()) +
                                               " .safetensors files and no index; name the one to load");
}

}  // namespace

std::vector<std::string> CheckpointIndex::shard_files() const {
  std::set<std::string> s;
  for (const auto& [name, file] : weight_map) s.insert(file);
  return {s.begin(), s.end()};
}

CheckpointIndex read_checkpoint_index(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kNotFound, path + ": cannot open the checkpoint index");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  StrictJson js = parse_json_strict(text.data(), text.data() + text.size());
  if (!js.parse_error.empty()) index_fail(path, "invalid JSON (" + js.parse_error + ")");
  if (!js.value.is_object()) index_fail(path, "not a JSON object");
  if (js.duplicate_key) index_fail(path, "tensor '" + *js.duplicate_key + "' is present twice");
  auto wm = js.value.find("weight_map");
  if (wm == js.value.end() || !wm->is_object()) index_fail(path, "no \"weight_map\" object");
  CheckpointIndex out;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string()) index_fail(path, "tensor '" + name + "' maps to a non-string shard");
    const auto& f = file.get_ref<const std::string&>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
      index_fail(path, "tensor '" + name + "' maps to '" + f + "', not a file name next to the index");
    }
    out.weight_map.emplace(name, f);
  }
  auto md = js.value.find("metadata");
  if (md != js.value.end() && md->is_object()) {
    auto ts = md->find("total_size");
    if (ts != md->end() && !ts->is_null()) {
      if (!ts->is_number_unsigned() && !(ts->is_number_integer() && ts->get<int64_t>() >= 0)) {
        index_fail(path, "metadata.total_size " + ts->dump() + " is not a non-negative integer");
      }
      out.total_size = ts->get<uint64_t>();
    }
  }
  return out;
}

Checkpoint Checkpoint::open(const std::string& given) {
  std::string path = is_dir(given) ? resolve_folder(given) : given;
  Checkpoint c;
  c.path_ = path;
  if (!ends_with(path, ".index.json")) {
    c.files_.push_back(SafetensorsFile::open(path));
    for (const auto& t : c.files_[0]->tensors()) c.where_.emplace(t.name, 0);
    return c;
  }

  CheckpointIndex idx = read_checkpoint_index(path);
  const std::string dir = parent_of(path);
  std::map<std::string, size_t> shard_no;
  for (const auto& f : idx.shard_files()) {
    shard_no.emplace(f, c.files_.size());
    c.files_.push_back(SafetensorsFile::open(dir + "/" + f));
  }
  // A name stored in two shards is ambiguous whatever the index says.
  std::map<std::string, size_t> stored;
  for (size_t i = 0; i < c.files_.size(); ++i) {
    for (const auto& t : c.files_[i]->tensors()) {
      auto [it, fresh] = stored.emplace(t.name, i);
      if (!fresh) {
        throw Error(ErrorKind::kFormat, path + ": tensor '" + t.name + "' is present twice, in '" +
                                            c.files_[it->second]->path() + "' and '" + c.files_[i]->path() +
                                            "'; remove one copy");
      }
    }
  }
  uint64_t bytes = 0;
  for (const auto& [name, file] : idx.weight_map) {
    size_t i = shard_no.at(file);
    const TensorInfo* t = c.files_[i]->find(name);
    if (!t) {
      throw Error(ErrorKind::kFormat, path + ": tensor '" + name + "' is mapped to shard '" + file +
                                          "', which has no such tensor; the index and its shards disagree");
    }
    bytes += t->end - t->begin;
    c.where_.emplace(name, i);
  }
  // total_size is the sum of the tensors' byte spans (what the usual writers record).
  if (idx.total_size && *idx.total_size != bytes) {
    throw Error(ErrorKind::kMismatch, path + ": metadata.total_size is " + std::to_string(*idx.total_size) +
                                          " bytes but the indexed tensors hold " + std::to_string(bytes) +
                                          "; a shard is not the one the index was written for");
  }
  return c;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [n, i] : where_) out.push_back(n);
  return out;
}

const SafetensorsFile* Checkpoint::file_of(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : files_[it->second].get();
}

std::shared_ptr<const SafetensorsFile> Checkpoint::shared_file_of(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : files_[it->second];
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  const SafetensorsFile* f = file_of(name);
  return f ? f->find(name) : nullptr;
}

const TensorInfo& Checkpoint::info(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) throw Error(ErrorKind::kNotFound, path_ + ": checkpoint has no tensor named '" + name + "'");
  return *t;
}

at::Tensor Checkpoint::view(const std::string& name) const {
  const SafetensorsFile* f = file_of(name);
  if (!f) throw Error(ErrorKind::kNotFound, path_ + ": checkpoint has no tensor named '" + name + "'");
  return f->view(name);
}

}  // namespace h3::io
