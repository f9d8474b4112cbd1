#include "marking/model_digest.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "h3/error.h"

namespace h3::marking {
namespace {

struct WeightFile {
  std::string relative, full;
  int64_t size = 0, mtime_ns = 0;
};

// Every .safetensors file under `dir`, with its path relative to `dir` ('/'-separated).
void collect(const std::string& dir, const std::string& prefix, std::vector<WeightFile>* out) {
  GError* error = nullptr;
  GDir* d = g_dir_open(dir.c_str(), 0, &error);
  if (!d) {
    const std::string why = error ? error->message : "cannot be opened";
    g_clear_error(&error);
    throw Error(ErrorKind::kFormat, "model hash: folder " + dir + ": " + why);
  }
  while (const gchar* name = g_dir_read_name(d)) {
    const std::string full = dir + "/" + name, relative = prefix + name;
    if (g_file_test(full.c_str(), G_FILE_TEST_IS_DIR)) {
      collect(full, relative + "/", out);
    } else if (g_str_has_suffix(name, ".safetensors")) {
      out->push_back({relative, full});
    }
  }
  g_dir_close(d);
}

// libcrypto's SHA-256 (with the CPU's SHA extensions where it has them, several times GLib's
// speed): the release's weights are tens of GB.
std::string file_sha256(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw Error(ErrorKind::kFormat, "model hash: cannot read " + path);
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    throw Error(ErrorKind::kInternal, "model hash: libcrypto's SHA-256 is not available");
  }
  std::vector<unsigned char> block(size_t{1} << 20);
  size_t n;
  while ((n = std::fread(block.data(), 1, block.size(), f.get())) > 0)
    EVP_DigestUpdate(ctx.get(), block.data(), n);
  if (std::ferror(f.get())) throw Error(ErrorKind::kFormat, "model hash: error reading " + path);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &size);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

// The files' identity for the cache: a file rewritten in place changes its size or its mtime.
std::string signature(const std::vector<WeightFile>& files) {
  std::string s;
  for (const WeightFile& f : files) {
    s += f.relative + '\0' + std::to_string(f.size) + '\0' + std::to_string(f.mtime_ns) + '\n';
  }
  return s;
}

std::mutex cache_mutex;
std::map<std::string, std::pair<std::string, std::string>> cache;  // path -> (signature, digest)

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  gchar* hex = g_compute_checksum_for_data(G_CHECKSUM_SHA256, reinterpret_cast<const guchar*>(bytes.data()),
                                           bytes.size());
  std::string s = hex;
  g_free(hex);
  return s;
}

std::string model_sha256(const std::string& path) {
  std::vector<WeightFile> files;
  if (g_file_test(path.c_str(), G_FILE_TEST_IS_DIR)) {
    collect(path, "", &files);
  } else if (g_file_test(path.c_str(), G_FILE_TEST_IS_REGULAR) &&
             g_str_has_suffix(path.c_str(), ".safetensors")) {
    gchar* base = g_path_get_basename(path.c_str());
    files.push_back({base, path});
    g_free(base);
  } else {
    throw Error(ErrorKind::kNotFound, "model hash: " + path + " is neither a folder nor a .safetensors file");
  }
  if (files.empty()) throw Error(ErrorKind::kNotFound, "model hash: " + path + " holds no .safetensors file");
  // sha256sum's order under LC_ALL=C sort: the paths' bytes.
  std::sort(files.begin(), files.end(),
            [](const WeightFile& a, const WeightFile& b) { return a.relative < b.relative; });
  for (WeightFile& f : files) {
    GStatBuf st;
    if (g_stat(f.full.c_str(), &st) != 0)
      throw Error(ErrorKind::kFormat, "model hash: cannot stat " + f.full);
    f.size = static_cast<int64_t>(st.st_size);
    f.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }
  const std::string sig = signature(files);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    const auto it = cache.find(path);
    if (it != cache.end() && it->second.first == sig) return it->second.second;
  }
  std::string lines;
  for (const WeightFile& f : files) lines += file_sha256(f.full) + "  " + f.relative + "\n";
  const std::string digest = sha256_hex(lines);
  std::lock_guard<std::mutex> lock(cache_mutex);
  cache[path] = {sig, digest};
  return digest;
}

}  // namespace h3::marking
