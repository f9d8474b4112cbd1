#include "shared_engine.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace h3gst {
namespace {

// What a GstH3Engine stands for: the key, and the engine while any holder holds it.
struct SharedState {
  EngineKey key;
  std::mutex m;
  std::condition_variable cv;
  // kOpening and kClosing: a holder opens or closes the engine outside the lock; the others wait
  // (a process world's door must be closed before the next one opens on its address).
  enum class Stage { kClosed, kOpening, kOpen, kClosing } stage = Stage::kClosed;
  std::unique_ptr<EngineHandle> handle;
  int holders = 0;  // elements from their start to READY -> NULL, and keep-open
  bool keep_open = false;
  int started = 0;  // elements started on it
};

// The engine objects of this process. An entry's weak reference goes null once the object's last
// reference went; such entries are dropped at the next lookup.
struct Registry {
  std::mutex m;
  std::vector<std::unique_ptr<GWeakRef>> engines;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: objects may be finalized at exit
  return *r;
}

bool same_key(const EngineKey& a, const EngineKey& b) {
  return a.options == b.options && a.lora == b.lora && a.group == b.group;
}

}  // namespace
}  // namespace h3gst

struct _GstH3Engine {
  GstObject parent;
  h3gst::SharedState* state;
};

G_DEFINE_TYPE(GstH3Engine, gst_h3_engine, GST_TYPE_OBJECT);

enum {
  PROP_ENGINE_0,
  PROP_ENGINE_MODEL,
  PROP_ENGINE_GROUP,
  PROP_ENGINE_OPEN,
  PROP_ENGINE_REQUESTS,
  PROP_ENGINE_KEEP_OPEN,
};

static void gst_h3_engine_init(GstH3Engine* self) {
  self->state = new h3gst::SharedState();
}

static void gst_h3_engine_finalize(GObject* object) {
  GstH3Engine* self = GST_H3_ENGINE(object);
  // Nobody holds it any more (a holder holds a reference): the engine is closed, unless
  // keep-open was left on, in which case it closes here.
  delete self->state;
  G_OBJECT_CLASS(gst_h3_engine_parent_class)->finalize(object);
}

static void gst_h3_engine_get_property(GObject* object, guint id, GValue* value, GParamSpec* pspec) {
  h3gst::SharedState& s = *GST_H3_ENGINE(object)->state;
  std::lock_guard<std::mutex> lk(s.m);
  switch (id) {
    case PROP_ENGINE_MODEL: g_value_set_string(value, s.key.options.model_dir.c_str()); break;
    case PROP_ENGINE_GROUP: g_value_set_string(value, s.key.group.c_str()); break;
    case PROP_ENGINE_OPEN: g_value_set_boolean(value, s.stage == h3gst::SharedState::Stage::kOpen); break;
    case PROP_ENGINE_REQUESTS:
      g_value_set_int(value,
                      s.stage == h3gst::SharedState::Stage::kOpen ? s.handle->requests_in_flight() : 0);
      break;
    case PROP_ENGINE_KEEP_OPEN: g_value_set_boolean(value, s.keep_open); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
}

static void gst_h3_engine_set_property(GObject* object, guint id, const GValue* value, GParamSpec* pspec) {
  GstH3Engine* self = GST_H3_ENGINE(object);
  if (id != PROP_ENGINE_KEEP_OPEN) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
    return;
  }
  const bool keep = g_value_get_boolean(value);
  bool release = false;
  {
    std::lock_guard<std::mutex> lk(self->state->m);
    if (keep == self->state->keep_open) return;
    self->state->keep_open = keep;
    if (keep) {
      ++self->state->holders;  // holds it from the next open on (or now, when it is open)
    } else {
      release = true;
    }
  }
  if (release) h3gst::release_engine_hold(self);
}

static void gst_h3_engine_class_init(GstH3EngineClass* klass) {
  GObjectClass* object_class = G_OBJECT_CLASS(klass);
  object_class->finalize = gst_h3_engine_finalize;
  object_class->get_property = gst_h3_engine_get_property;
  object_class->set_property = gst_h3_engine_set_property;
  const auto read_only = static_cast<GParamFlags>(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_property(
      object_class, PROP_ENGINE_MODEL,
      g_param_spec_string("model", "Model", "The model folder of the engine", nullptr, read_only));
  g_object_class_install_property(
      object_class, PROP_ENGINE_GROUP,
      g_param_spec_string("engine-group", "Engine group", "The engine-group of the elements that share it",
                          nullptr, read_only));
  g_object_class_install_property(
      object_class, PROP_ENGINE_OPEN,
      g_param_spec_boolean("open", "Open", "Whether the model is loaded now", FALSE, read_only));
  g_object_class_install_property(
      object_class, PROP_ENGINE_REQUESTS,
      g_param_spec_int("requests", "Requests", "Requests running on the engine now", 0, G_MAXINT, 0,
                       read_only));
  g_object_class_install_property(
      object_class, PROP_ENGINE_KEEP_OPEN,
      g_param_spec_boolean(
          "keep-open", "Keep open",
          "An application's hold: the engine stays loaded once opened, also while no element "
          "uses it (between pipelines), until this is set back to false",
          FALSE, static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS)));
}

namespace h3gst {

std::string engine_key_difference(const EngineKey& a, const EngineKey& b) {
  const h3::EngineOptions &x = a.options, &y = b.options;
  if (x.model_dir != y.model_dir) return "model";
  if (x.ranks != y.ranks) return "ranks";
  if (x.tp != y.tp) return "tp-size";
  if (x.sp != y.sp) return "sp-size";
  if (x.device != y.device) return "device";
  if (x.timeout != y.timeout) return "timeout";
  if (x.free_text_encoder != y.free_text_encoder) return "free-text-encoder";
  if (x.compute_dtype != y.compute_dtype) return "compute-dtype";
  if (x.ref2va != y.ref2va) return "references";  // Ref2VA's DiT is another engine
  if (x.adaln_tables != y.adaln_tables) return "adaln-tables";
  if (x.max_memory != y.max_memory) return "max-memory";
  if (x.device_memory != y.device_memory) return "device-memory";
  if (x.rendezvous != y.rendezvous) return "rendezvous";
  if (x.world_size != y.world_size) return "world-size";
  if (x.token_file != y.token_file) return "token-file";
  if (a.lora != b.lora) return "lora";
  if (a.group != b.group) return "engine-group";
  return "";
}

GstH3Engine* engine_for_key(const EngineKey& key, std::vector<std::string>* others) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.m);
  GstH3Engine* engine = nullptr;
  for (auto it = r.engines.begin(); it != r.engines.end();) {
    auto* e = static_cast<GstH3Engine*>(g_weak_ref_get(it->get()));
    if (!e) {
      g_weak_ref_clear(it->get());
      it = r.engines.erase(it);
      continue;
    }
    if (!engine && same_key(e->state->key, key)) {
      engine = e;
    } else {
      if (others) {
        others->push_back("the engine of model '" + e->state->key.options.model_dir + "': its option '" +
                          engine_key_difference(key, e->state->key) + "' differs");
      }
      gst_object_unref(e);
    }
    ++it;
  }
  if (!engine) {
    engine = GST_H3_ENGINE(g_object_new(GST_TYPE_H3_ENGINE, nullptr));
    gst_object_ref_sink(engine);
    engine->state->key = key;
    auto ref = std::make_unique<GWeakRef>();
    g_weak_ref_init(ref.get(), engine);
    r.engines.push_back(std::move(ref));
  }
  return engine;
}

bool hold_engine(GstH3Engine* engine, const EngineModule& module, const h3::ProgressFn& on_progress,
                 const std::function<void()>& opening, EngineFailure* failure, bool* opened_here) {
  using Stage = SharedState::Stage;
  SharedState& s = *engine->state;
  *opened_here = false;
  std::unique_lock<std::mutex> lk(s.m);
  for (;;) {
    s.cv.wait(lk, [&] { return s.stage == Stage::kOpen || s.stage == Stage::kClosed; });
    if (s.stage == Stage::kOpen) {
      ++s.holders;
      return true;
    }
    // Closed: this holder opens it.
    s.stage = Stage::kOpening;
    lk.unlock();
    if (opening) opening();
    EngineHandle* handle = module.open(s.key.options, on_progress, failure);
    lk.lock();
    if (handle) {
      s.handle.reset(handle);
      s.stage = Stage::kOpen;
      ++s.holders;
      *opened_here = true;
      s.cv.notify_all();
      return true;
    }
    s.stage = Stage::kClosed;
    s.cv.notify_all();  // a waiting holder tries again, and reports its own failure
    return false;
  }
}

void release_engine_hold(GstH3Engine* engine) {
  using Stage = SharedState::Stage;
  SharedState& s = *engine->state;
  std::unique_ptr<EngineHandle> closing;
  {
    std::unique_lock<std::mutex> lk(s.m);
    if (--s.holders > 0 || s.stage != Stage::kOpen) return;
    s.stage = Stage::kClosing;
    closing = std::move(s.handle);
  }
  closing.reset();  // joins the ranks (a process world's workers are told to stop)
  {
    std::lock_guard<std::mutex> lk(s.m);
    s.stage = Stage::kClosed;
  }
  s.cv.notify_all();
}

const EngineKey& engine_key(GstH3Engine* engine) {
  return engine->state->key;
}

EngineHandle& engine_handle(GstH3Engine* engine) {
  return *engine->state->handle;
}

void engine_started(GstH3Engine* engine, bool started) {
  std::lock_guard<std::mutex> lk(engine->state->m);
  engine->state->started += started ? 1 : -1;
}

int engine_started_count(GstH3Engine* engine) {
  std::lock_guard<std::mutex> lk(engine->state->m);
  return engine->state->started;
}

GstContext* engine_context_new(GstH3Engine* engine) {
  GstContext* c = gst_context_new(kEngineContextType, TRUE);
  GstStructure* s = gst_context_writable_structure(c);
  gst_structure_set(s, "engine", GST_TYPE_H3_ENGINE, engine, nullptr);
  return c;
}

GstH3Engine* engine_from_context(const GstContext* context) {
  if (!context || g_strcmp0(gst_context_get_context_type(context), kEngineContextType) != 0) return nullptr;
  GstH3Engine* engine = nullptr;
  if (!gst_structure_get(gst_context_get_structure(context), "engine", GST_TYPE_H3_ENGINE, &engine,
                         nullptr)) {
    return nullptr;
  }
  return engine;
}

}  // namespace h3gst
