#include "vae/chunk_sink.h"

namespace h3 {

ChunkSink::~ChunkSink() = default;

}  // namespace h3
