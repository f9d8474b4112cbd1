// h3::Generator (h3/generator.h) over the engine (engine/engine.h): the chunks through
// CallbackSink, the latents copied out of their tensors. Compiled into libh3-engine alone, with
// hidden visibility: only what h3/generator.h marks H3_API leaves the library.
#include "h3/generator.h"

#include <ATen/core/Tensor.h>

#include <utility>

#include "api/callback_sink.h"
#include "engine/engine.h"

namespace h3 {
namespace {

std::vector<int64_t> shape_of(const at::Tensor& t) {
  return t.defined() ? t.sizes().vec() : std::vector<int64_t>{};
}

std::vector<float> floats_of(const at::Tensor& t) {
  if (!t.defined()) return {};
  const at::Tensor c = t.to(at::kCPU).to(at::kFloat).contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

}  // namespace

struct Generator::Impl {
  std::unique_ptr<Engine> engine;
};

Generator::Generator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Generator::~Generator() = default;

std::string Generator::default_model_dir() {
  return h3::default_model_dir();
}

std::unique_ptr<Generator> Generator::open(const EngineOptions& options, const ProgressFn& on_progress) {
  EngineOptions o = options;
  if (o.model_dir.empty()) o.model_dir = h3::default_model_dir();
  auto impl = std::make_unique<Impl>();
  impl->engine = Engine::open(o, on_progress);
  return std::unique_ptr<Generator>(new Generator(std::move(impl)));
}

ClipPlan Generator::plan(const GenerationRequest& request) const {
  return impl_->engine->plan(request);
}

void Generator::generate(const GenerationRequest& request, const GenerateCall& call) {
  if (!call.on_chunk) {
    throw Error(ErrorKind::kInvalidArgument,
                "generate: GenerateCall::on_chunk is empty: the frames would go nowhere");
  }
  const ClipPlan plan = call.plan ? *call.plan : impl_->engine->plan(request);
  CallbackSink sink(call.on_chunk, plan.audio_rate, "the application's on_chunk");
  StreamControl no_control;
  GenerateExtras extras;
  if (call.on_latents) {
    extras.on_latents = [&call](const at::Tensor& video, const at::Tensor& audio) {
      call.on_latents(Latents{shape_of(video), floats_of(video), shape_of(audio), floats_of(audio)});
    };
  }
  extras.on_causal_chunk = call.on_causal_chunk;
  try {
    impl_->engine->generate(request, plan, sink, call.on_progress, call.control ? *call.control : no_control,
                            extras);
  } catch (const Error& e) {
    if (sink.stopped() && e.kind() != ErrorKind::kCancelled) throw Error(ErrorKind::kCancelled, e.what());
    throw;
  }
}

const EngineOptions& Generator::options() const {
  return impl_->engine->options();
}

int Generator::requests_in_flight() const {
  return impl_->engine->requests_in_flight();
}

}  // namespace h3
