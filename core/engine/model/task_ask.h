// What a request asks of the model's condition paths, known before any of its pictures is
// decoded: the CLI and the elements check it against the model first (check_task,
// engine/engine.h), so that a model that cannot serve it refuses before a picture or reference
// is read. Torch-free: the plugin includes it.
#pragma once

#include "h3/request.h"

namespace h3 {

struct TaskAsk {
  bool first_frame = false, last_frame = false, references = false;
  bool embeddings = false;  // the prompt comes as precomputed embeddings (no vision tower needed)
};

inline TaskAsk task_ask(const GenerationRequest& r) {
  TaskAsk a;
  a.first_frame = !r.first_frame.empty();
  a.last_frame = !r.last_frame.empty();
  a.references = !r.references.empty();
  a.embeddings = !r.embeds_path.empty();
  return a;
}

}  // namespace h3
