#include "picture_bombs.h"

#include <zlib.h>

#include <atomic>
#include <fstream>
#include <stdexcept>

namespace h3test {
namespace {

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string png_chunk(const std::string& type, const std::string& data) {
  const std::string body = type + data;
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  return be32(static_cast<uint32_t>(data.size())) + body + be32(static_cast<uint32_t>(crc));
}

std::atomic<uint64_t> g_largest{0};
GstAllocator* g_sysmem = nullptr;

struct CountingAllocator {
  GstAllocator parent;
};
struct CountingAllocatorClass {
  GstAllocatorClass parent_class;
};
G_DEFINE_TYPE(CountingAllocator, counting_allocator, GST_TYPE_ALLOCATOR)

GstMemory* counting_alloc(GstAllocator*, gsize size, GstAllocationParams* params) {
  const uint64_t bytes = size + (params ? params->prefix + params->padding : 0);
  uint64_t seen = g_largest.load();
  while (bytes > seen && !g_largest.compare_exchange_weak(seen, bytes)) {
  }
  return gst_allocator_alloc(g_sysmem, size, params);  // the memory is the system allocator's
}
void counting_free(GstAllocator*, GstMemory* memory) {
  gst_allocator_free(g_sysmem, memory);
}
void counting_allocator_class_init(CountingAllocatorClass* klass) {
  GstAllocatorClass* a = GST_ALLOCATOR_CLASS(klass);
  a->alloc = counting_alloc;
  a->free = counting_free;
}
void counting_allocator_init(CountingAllocator* self) {
  GST_ALLOCATOR(self)->mem_type = "CountingMemory";
}

}  // namespace

std::string black_png(int width, int height) {
  const std::string row(1 + 3 * static_cast<size_t>(width), '\0');  // filter byte 0, then the pixels
  z_stream z{};
  if (deflateInit(&z, 9) != Z_OK) throw std::runtime_error("deflateInit failed");
  auto compress_row = [&]() {
    std::string out(deflateBound(&z, static_cast<uLong>(row.size())) + 64, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(row.data()));
    z.avail_in = static_cast<uInt>(row.size());
    z.next_out = reinterpret_cast<Bytef*>(&out[0]);
    z.avail_out = static_cast<uInt>(out.size());
    if (deflate(&z, Z_FULL_FLUSH) != Z_OK || z.avail_in != 0) throw std::runtime_error("deflate failed");
    out.resize(out.size() - z.avail_out);
    return out;
  };
  const std::string first = compress_row();  // with the zlib header
  const std::string again = compress_row(), third = compress_row();
  deflateEnd(&z);
  if (again != third) throw std::runtime_error("a fully flushed row does not compress to the same bytes");
  std::string idat = first;
  idat.reserve(first.size() + again.size() * static_cast<size_t>(height) + 8);
  for (int y = 1; y < height; ++y) idat += again;
  idat += std::string("\x03\x00", 2);  // the last block: fixed codes, end of block at once
  const uLong row_adler = adler32(adler32(0, nullptr, 0), reinterpret_cast<const Bytef*>(row.data()),
                                  static_cast<uInt>(row.size()));
  uLong all = adler32(0, nullptr, 0);
  for (int y = 0; y < height; ++y) all = adler32_combine(all, row_adler, static_cast<z_off_t>(row.size()));
  idat += be32(static_cast<uint32_t>(all));
  const std::string ihdr = be32(static_cast<uint32_t>(width)) + be32(static_cast<uint32_t>(height)) +
                           std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB, no interlace
  return std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) + png_chunk("IDAT", idat) +
         png_chunk("IEND", "");
}

std::string jpeg_claiming(const std::string& jpeg, int width, int height) {
  const size_t sof = jpeg.find("\xff\xc0");
  if (sof == std::string::npos || sof + 9 > jpeg.size()) throw std::runtime_error("no SOF0 in the JPEG");
  std::string out = jpeg;
  // FF C0, length (2), precision (1), height (2), width (2).
  out[sof + 5] = static_cast<char>(height >> 8);
  out[sof + 6] = static_cast<char>(height);
  out[sof + 7] = static_cast<char>(width >> 8);
  out[sof + 8] = static_cast<char>(width);
  return out;
}

void count_gst_allocations() {
  if (g_sysmem) return;
  g_sysmem = gst_allocator_find(GST_ALLOCATOR_SYSMEM);
  auto* counting = static_cast<GstAllocator*>(g_object_new(counting_allocator_get_type(), nullptr));
  gst_object_ref_sink(counting);
  gst_allocator_set_default(counting);  // takes the reference
}

uint64_t largest_gst_allocation() {
  return g_largest.load();
}

void reset_gst_allocations() {
  g_largest = 0;
}

int64_t peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to the current resident size
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace h3test
