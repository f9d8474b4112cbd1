// check_task (engine/engine.h): the model's condition paths against what a request asks, before
// any picture of it is decoded.
#include "engine/engine.h"
#include "engine/model/model.h"

namespace h3 {

int64_t check_task(const EngineOptions& opts, const TaskAsk& ask) {
  if (!ask.first_frame && !ask.last_frame && !ask.references) return 0;  // T2VA: Engine::plan says
  const ModelInfo m = read_model(opts.model_dir, opts.ref2va);
  check_task(m, ask);
  return m.defaults.num_frames;
}

}  // namespace h3
