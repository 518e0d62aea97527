// C++ over the compiler plug-in's C table (torch_infini/compiler_plugin.h):
// a loaded plug-in, its modules and their kernels, with every failure a
// c10::Error that names the plug-in, the function and the plug-in's message.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "torch_infini/compiler_plugin.h"

namespace torch_infini::compiler {

class Module;

// One plug-in: its checked table, the library it came from (if external).
class Plugin : public std::enable_shared_from_this<Plugin> {
 public:
  // `table` as the init function filled it; `library` is a dlopen handle
  // (nullptr for a built-in plug-in), closed after the context is destroyed.
  // Throws if the table is unusable (size, ABI version, missing members).
  Plugin(std::string origin, const TorchInfiniCompilerPlugin& table, void* library);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const std::string& name() const { return name_; }
  const std::string& deviceType() const { return device_type_; }
  const std::string& sourceLanguage() const { return source_language_; }
  // "built-in", or the path of the library it was loaded from.
  const std::string& origin() const { return origin_; }

  std::vector<uint8_t> compile(const std::string& source, const std::string& options) const;
  std::string runtimeSource() const;
  std::vector<std::string> passPipeline() const;
  std::shared_ptr<Module> load(const std::vector<uint8_t>& binary) const;

  // "compiler plug-in 'name' (origin)": how errors name it.
  std::string describe() const;
  const TorchInfiniCompilerPlugin& table() const { return table_; }

 private:
  std::string origin_;
  TorchInfiniCompilerPlugin table_;
  void* library_;
  std::string name_, device_type_, source_language_;
};

// A kernel of a loaded module; launching queues it on a stream.
class Kernel {
 public:
  Kernel(std::shared_ptr<const Module> module, std::string name, void* function, size_t num_args)
      : module_(std::move(module)),
        name_(std::move(name)),
        function_(function),
        num_args_(num_args) {}
  const std::string& name() const { return name_; }
  size_t numArgs() const { return num_args_; }
  // `slots`: one 8-byte value per argument (pointer, int64_t or double).
  void launch(const uint64_t* slots, size_t count, const std::array<uint32_t, 3>& grid,
              const std::array<uint32_t, 3>& block, size_t shared_memory, void* stream) const;
  void launch(const std::vector<uint64_t>& slots, const std::array<uint32_t, 3>& grid,
              const std::array<uint32_t, 3>& block, size_t shared_memory, void* stream) const {
    launch(slots.data(), slots.size(), grid, block, shared_memory, stream);
  }
  // Launches of any kernel so far, in this process (tests count them).
  static uint64_t launches();

 private:
  std::shared_ptr<const Module> module_;  // kept loaded while the kernel lives
  std::string name_;
  void* function_;
  size_t num_args_;
};

// A loaded binary; unloaded when the last kernel of it goes.
class Module : public std::enable_shared_from_this<Module> {
 public:
  Module(std::shared_ptr<const Plugin> plugin, void* handle)
      : plugin_(std::move(plugin)), handle_(handle) {}
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  Kernel kernel(const std::string& name) const;
  const Plugin& plugin() const { return *plugin_; }

 private:
  std::shared_ptr<const Plugin> plugin_;
  void* handle_;
};

// The plug-in for `device_type` ("cpu", "nvidia", ...): an external one from
// TORCH_INFINI_COMPILER_PLUGINS that declares it, else the built-in one.
// Loaded once per process; a failure is raised again on every request.
std::shared_ptr<Plugin> pluginFor(const std::string& device_type);
// Loads the plug-in library at `path` (not cached); throws naming the path
// and what is wrong: not loadable, no init symbol, init failed, bad table.
std::shared_ptr<Plugin> loadExternal(const std::string& path);
// Adds an external plug-in library to those TORCH_INFINI_COMPILER_PLUGINS
// names (Python's entry points); considered from the next request on.
void addExternal(const std::string& path);
// The device types with a built-in plug-in.
std::vector<std::string> builtinDeviceTypes();

}  // namespace torch_infini::compiler
