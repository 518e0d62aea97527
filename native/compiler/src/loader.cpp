// Finding a device type's compiler plug-in: external libraries named in
// TORCH_INFINI_COMPILER_PLUGINS (or added from Python entry points) first,
// then the built-in ones.
#include <c10/util/Exception.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <variant>
#include <vector>

#include "torch_infini/compiler/plugin.h"

extern "C" int torch_infini_nvidia_compiler_plugin_init(TorchInfiniCompilerPlugin* table,
                                                        size_t table_size, char* error,
                                                        size_t error_size);

namespace torch_infini::compiler {
namespace {

struct Builtin {
  const char* device_type;
  TorchInfiniCompilerPluginInit init;
};
// host and InfiniRT cpu both compile for the host's processors; nvidia
// compiles Triton for the GPU's architecture.
constexpr Builtin kBuiltins[] = {{"cpu", &torch_infini_cpu_compiler_plugin_init},
                                 {"nvidia", &torch_infini_nvidia_compiler_plugin_init}};

std::shared_ptr<Plugin> fromInit(TorchInfiniCompilerPluginInit init, const std::string& origin,
                                 void* library) {
  TorchInfiniCompilerPlugin table;
  std::memset(&table, 0, sizeof table);
  char error[4096] = "";
  int status = 0;
  try {
    status = init(&table, sizeof table, error, sizeof error);
  } catch (...) {  // a C++ plug-in that let an exception out
    status = -1;
    std::strncpy(error, "its init function threw a C++ exception", sizeof error - 1);
  }
  if (status != 0) {
    if (library != nullptr) dlclose(library);
    TORCH_CHECK(false, "compiler plug-in from ", origin,
                ": its init function failed: ", *error != '\0' ? error : "(no message)");
  }
  return std::make_shared<Plugin>(origin, table, library);
}

std::vector<std::string> splitPaths(const char* list) {
  std::vector<std::string> paths;
  if (list == nullptr) return paths;
  std::stringstream stream(list);
  for (std::string path; std::getline(stream, path, ':');)
    if (!path.empty()) paths.push_back(path);
  return paths;
}

// A request's outcome, kept so that a failure is raised again, identically.
using Outcome = std::variant<std::shared_ptr<Plugin>, std::exception_ptr>;

struct Registry {
  std::mutex mutex;
  std::vector<std::string> added;           // paths from Python entry points
  std::map<std::string, Outcome> external;  // by path
  std::map<std::string, Outcome> by_device_type;
};

Registry& registry() {
  static Registry* r = new Registry();  // plug-ins stay loaded until exit
  return *r;
}

Outcome attempt(const std::function<std::shared_ptr<Plugin>()>& load) {
  try {
    return load();
  } catch (...) {  // kept whatever it is: a later request raises it again
    return std::current_exception();
  }
}

std::shared_ptr<Plugin> unwrap(const Outcome& outcome) {
  if (const auto* plugin = std::get_if<std::shared_ptr<Plugin>>(&outcome)) return *plugin;
  std::rethrow_exception(std::get<std::exception_ptr>(outcome));
}

std::shared_ptr<Plugin> find(Registry& r, const std::string& device_type) {
  std::vector<std::string> paths = splitPaths(std::getenv("TORCH_INFINI_COMPILER_PLUGINS"));
  paths.insert(paths.end(), r.added.begin(), r.added.end());
  // Every configured library is loaded before the device type is looked up:
  // one that cannot be used fails every lookup (it was asked for, and
  // nothing silently stands in for it), not only those it comes before.
  // The first that declares the device type serves it.
  std::shared_ptr<Plugin> found;
  for (const std::string& path : paths) {
    auto [it, inserted] = r.external.try_emplace(path);
    if (inserted) it->second = attempt([&] { return loadExternal(path); });
    const std::shared_ptr<Plugin> plugin = unwrap(it->second);
    if (found == nullptr && plugin->deviceType() == device_type) found = plugin;
  }
  if (found != nullptr) return found;
  for (const Builtin& builtin : kBuiltins)
    if (device_type == builtin.device_type) return fromInit(builtin.init, "built-in", nullptr);
  TORCH_CHECK_NOT_IMPLEMENTED(false, "no compiler plug-in serves device type '", device_type,
                              "': torch_infini has built-in plug-ins for ",
                              c10::Join(", ", builtinDeviceTypes()),
                              ", and TORCH_INFINI_COMPILER_PLUGINS names none for it");
}

}  // namespace

std::shared_ptr<Plugin> loadExternal(const std::string& path) {
  dlerror();
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    TORCH_CHECK(false, "compiler plug-in ", path,
                ": cannot be loaded: ", why ? why : "dlopen failed");
  }
  auto init = reinterpret_cast<TorchInfiniCompilerPluginInit>(
      dlsym(library, TORCH_INFINI_COMPILER_PLUGIN_INIT_SYMBOL));
  if (init == nullptr) {
    dlclose(library);
    TORCH_CHECK(false, "compiler plug-in ", path, ": exports no ",
                TORCH_INFINI_COMPILER_PLUGIN_INIT_SYMBOL,
                " (the init function torch_infini/compiler_plugin.h declares)");
  }
  return fromInit(init, path, library);
}

void addExternal(const std::string& path) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const std::string& known : r.added)
    if (known == path) return;
  r.added.push_back(path);
  r.by_device_type.clear();  // the next request considers it
}

std::shared_ptr<Plugin> pluginFor(const std::string& device_type) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto [it, inserted] = r.by_device_type.try_emplace(device_type);
  if (inserted) it->second = attempt([&] { return find(r, device_type); });
  return unwrap(it->second);
}

std::vector<std::string> builtinDeviceTypes() {
  std::vector<std::string> types;
  for (const Builtin& builtin : kBuiltins) types.emplace_back(builtin.device_type);
  return types;
}

}  // namespace torch_infini::compiler
