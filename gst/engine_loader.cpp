#include "engine_loader.h"

#include <gmodule.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace h3gst {
namespace {

std::mutex g_mutex;
const EngineModule* g_module = nullptr;
std::string g_path;

std::vector<std::string> candidates(const std::string& plugin_dir) {
  std::vector<std::string> out;
  if (const char* env = std::getenv("H3_ENGINE_MODULE"); env && *env) {
    out.emplace_back(env);
    return out;  // an explicit choice is not second-guessed
  }
  if (!plugin_dir.empty()) {
    for (const char* sub : {"gst-h3", "gst-engine"}) {
      gchar* p = g_build_filename(plugin_dir.c_str(), "..", sub, kEngineModuleFile, nullptr);
      out.emplace_back(p);
      g_free(p);
    }
  }
  return out;
}

std::string not_found(const std::string& tried) {
  return "could not load the gst-h3 engine module (" + std::string(kEngineModuleFile) +
         "); tried: " + (tried.empty() ? std::string("nothing (the plugin's folder is unknown)") : tried) +
         ". Reinstall gst-h3, or set H3_ENGINE_MODULE to the module's path";
}

}  // namespace

std::string plugin_dir_of(GstElement* element) {
  std::string dir;
  GstElementFactory* factory = gst_element_get_factory(element);
  GstPlugin* plugin = factory ? gst_plugin_feature_get_plugin(GST_PLUGIN_FEATURE(factory)) : nullptr;
  if (plugin) {
    if (const gchar* file = gst_plugin_get_filename(plugin)) {
      gchar* d = g_path_get_dirname(file);
      dir = d;
      g_free(d);
    }
    gst_object_unref(plugin);
  }
  return dir;
}

const EngineModule* load_engine_module(const std::string& plugin_dir, std::string* error,
                                       std::string* loaded_from) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_module) {
    if (loaded_from) *loaded_from = g_path;
    return g_module;
  }
  std::string tried;
  for (const std::string& path : candidates(plugin_dir)) {
    if (!tried.empty()) tried += "; ";
    if (!g_file_test(path.c_str(), G_FILE_TEST_IS_REGULAR)) {
      tried += path + ": no such file";
      continue;
    }
    // Local binding: LibTorch's symbols stay out of the global namespace.
    GModule* m = g_module_open(path.c_str(), G_MODULE_BIND_LOCAL);
    if (!m) {
      tried += path + ": " + g_module_error();
      continue;
    }
    gpointer sym = nullptr;
    if (!g_module_symbol(m, kEngineModuleSymbol, &sym) || !sym) {
      tried += path + ": no " + std::string(kEngineModuleSymbol) + " symbol";
      g_module_close(m);
      continue;
    }
    const EngineModule* mod = reinterpret_cast<const EngineModule* (*)()>(sym)();
    if (!mod || mod->abi != kEngineModuleAbi) {
      tried += path + ": built for another version of the plugin (ABI " +
               std::to_string(mod ? mod->abi : -1) + ", expected " + std::to_string(kEngineModuleAbi) + ")";
      g_module_close(m);
      continue;
    }
    g_module_make_resident(m);
    g_module = mod;
    g_path = path;
    if (loaded_from) *loaded_from = g_path;
    return g_module;
  }
  if (error) *error = not_found(tried);
  return nullptr;
}

bool engine_module_present(const std::string& plugin_dir, std::string* error) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_module) return true;
  std::string tried;
  for (const std::string& path : candidates(plugin_dir)) {
    if (g_file_test(path.c_str(), G_FILE_TEST_IS_REGULAR)) return true;
    tried += (tried.empty() ? "" : "; ") + path + ": no such file";
  }
  if (error) *error = not_found(tried);
  return false;
}

}  // namespace h3gst
