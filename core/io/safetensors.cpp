#include "io/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "h3/error.h"

namespace h3::io {

MappedFile::MappedFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw Error(errno == ENOENT ? ErrorKind::kNotFound : ErrorKind::kInvalidArgument,
                path + ": cannot open (" + std::strerror(errno) + "); check the checkpoint path");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorKind::kInvalidArgument, path + ": not a regular file; give a .safetensors file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw Error(ErrorKind::kInvalidArgument, path + ": cannot map (" + std::strerror(err) + ")");
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file referenced
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

namespace {

// Whole pages covering [offset, offset + bytes), clipped to the file.
std::pair<uint64_t, uint64_t> page_span(uint64_t offset, uint64_t bytes, uint64_t size) {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return {offset / page * page, std::min(size, (offset + bytes + page - 1) / page * page)};
}

}  // namespace

void MappedFile::release_pages(uint64_t offset, uint64_t bytes) const {
  if (!data_ || bytes == 0) return;
  // Rounded outward: neighbours' pages fault back in unchanged, since the
  // mapping is private and never written.
  auto [lo, hi] = page_span(offset, bytes, size_);
  if (hi > lo) ::madvise(const_cast<uint8_t*>(data_) + lo, hi - lo, MADV_DONTNEED);
}

void MappedFile::prefetch_pages(uint64_t offset, uint64_t bytes) const {
#ifdef MADV_POPULATE_READ
  if (!data_ || bytes == 0) return;
  auto [lo, hi] = page_span(offset, bytes, size_);
  // Best effort: an older kernel answers EINVAL and the copy faults pages in itself.
  if (hi > lo) (void)::madvise(const_cast<uint8_t*>(data_) + lo, hi - lo, MADV_POPULATE_READ);
#else
  (void)offset;
  (void)bytes;
#endif
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto map = std::make_shared<const MappedFile>(path);
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->header_ = parse_safetensors_header(map->data(), map->size(), path);
  f->map_ = std::move(map);
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) f->by_name_.emplace(f->header_.tensors[i].name, i);
  return f;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) throw Error(ErrorKind::kNotFound, path_ + ": no tensor named '" + name + "'");
  return *t;
}

at::Tensor SafetensorsFile::view(const std::string& name) const {
  return view(info(name));
}

at::Tensor SafetensorsFile::view(const TensorInfo& t) const {
  auto keep = map_;  // the view's deleter owns a reference to the mapping
  void* p = const_cast<uint8_t*>(tensor_data(t));
  return at::from_blob(
      p, t.shape, [keep](void*) mutable { keep.reset(); }, at::TensorOptions().dtype(t.dtype));
}

namespace {

void write_all(std::FILE* f, const void* p, size_t n, const std::string& path) {
  if (n && std::fwrite(p, 1, n, f) != n) {
    std::fclose(f);
    throw Error(ErrorKind::kInvalidArgument, path + ": write failed (" + std::strerror(errno) + ")");
  }
}

}  // namespace

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__") {
      throw Error(ErrorKind::kInvalidArgument, path + ": tensor name '" + name + "' cannot be stored");
    }
    if (!seen.insert(name).second) {
      throw Error(ErrorKind::kInvalidArgument, path + ": tensor '" + name + "' given twice");
    }
    if (!t.defined()) throw Error(ErrorKind::kInvalidArgument, path + ": tensor '" + name + "' is undefined");
    const char* dt = dtype_to_string(t.scalar_type());
    uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dt}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');

  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    throw Error(errno == ENOENT ? ErrorKind::kNotFound : ErrorKind::kInvalidArgument,
                path + ": cannot create (" + std::strerror(errno) + ")");
  }
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  write_all(f, len, 8, path);
  write_all(f, text.data(), text.size(), path);
  for (const auto& [name, t] : tensors) {
    if (t.numel() == 0) continue;
    at::Tensor c = t.to(at::kCPU).contiguous();
    write_all(f, c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size(), path);
  }
  if (std::fclose(f) != 0) {
    throw Error(ErrorKind::kInvalidArgument, path + ": close failed (" + std::strerror(errno) + ")");
  }
}

}  // namespace h3::io
