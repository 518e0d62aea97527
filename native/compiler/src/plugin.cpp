// A plug-in's table checked once, and each call's status turned into an
// exception naming the plug-in.
#include "torch_infini/compiler/plugin.h"

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <cstring>

namespace torch_infini::compiler {
namespace {

// The table up to its last member: what ABI version 1 requires.
constexpr size_t kRequiredTableSize =
    offsetof(TorchInfiniCompilerPlugin, destroy) + sizeof(TorchInfiniCompilerPlugin::destroy);

// A message buffer for one call into the plug-in.
struct ErrorBuffer {
  // Only the first byte is cleared: a launch should not write 4 KiB of zeros.
  ErrorBuffer() { text[0] = '\0'; }
  char text[4096];
  std::string str() const {
    const std::string message(text, strnlen(text, sizeof text));
    return message.empty() ? "(the plug-in gave no message)" : message;
  }
};

// A table's string member; "" when missing.
std::string member(const char* value) { return value != nullptr ? value : ""; }

}  // namespace

Plugin::Plugin(std::string origin, const TorchInfiniCompilerPlugin& table, void* library)
    : origin_(std::move(origin)), table_(table), library_(library) {
  // On a refusal the context is released and the library closed here (the
  // destructor does not run for a constructor that throws). A table of
  // another ABI version or size has an unknown layout: its destroy is not
  // called.
  auto refuse = [&](const std::string& why, bool layout_known = true) {
    if (layout_known && table_.destroy != nullptr && table_.context != nullptr)
      table_.destroy(table_.context);
    if (library_ != nullptr) dlclose(library_);
    TORCH_CHECK(false, "compiler plug-in from ", origin_, ": ", why);
  };
  if (table.abi_version != TORCH_INFINI_COMPILER_PLUGIN_ABI_VERSION)
    refuse("it was built for ABI version " + std::to_string(table.abi_version) +
               ", torch_infini implements version " +
               std::to_string(TORCH_INFINI_COMPILER_PLUGIN_ABI_VERSION),
           /*layout_known=*/false);
  // A larger table (a newer header) is fine: only the members known here are read.
  if (table.size < kRequiredTableSize)
    refuse("its table size is " + std::to_string(table.size) + " bytes; ABI version " +
               std::to_string(TORCH_INFINI_COMPILER_PLUGIN_ABI_VERSION) + " needs " +
               std::to_string(kRequiredTableSize) + " (built against another torch_infini header?)",
           /*layout_known=*/false);
  name_ = member(table.name);
  device_type_ = member(table.device_type);
  source_language_ = member(table.source_language);
  for (const auto& [value, what] : {std::pair{&name_, "name"},
                                    {&device_type_, "device_type"},
                                    {&source_language_, "source_language"}})
    if (value->empty()) refuse(std::string("its table has no ") + what);
  if (source_language_ != TORCH_INFINI_SOURCE_CPP && source_language_ != TORCH_INFINI_SOURCE_TRITON)
    refuse("'" + name_ + "' compiles '" + source_language_ + "', which is neither '" +
           TORCH_INFINI_SOURCE_CPP + "' nor '" + TORCH_INFINI_SOURCE_TRITON + "'");
  const std::pair<const void*, const char*> required[] = {
      {reinterpret_cast<const void*>(table.compile), "compile"},
      {reinterpret_cast<const void*>(table.free_binary), "free_binary"},
      {reinterpret_cast<const void*>(table.module_load), "module_load"},
      {reinterpret_cast<const void*>(table.module_unload), "module_unload"},
      {reinterpret_cast<const void*>(table.get_kernel_address), "get_kernel_address"},
      {reinterpret_cast<const void*>(table.launch_kernel), "launch_kernel"},
  };
  for (const auto& [function, what] : required)
    if (function == nullptr) refuse("'" + name_ + "' leaves " + what + " NULL");
}

Plugin::~Plugin() {
  if (table_.destroy != nullptr) table_.destroy(table_.context);
  // The library stays loaded: launches still queued on a stream may call
  // into it (a host function, its release), and nothing tells when the last
  // one ran.
}

std::string Plugin::describe() const {
  return "compiler plug-in '" + name_ + "' (" + origin_ + ")";
}

std::vector<uint8_t> Plugin::compile(const std::string& source, const std::string& options) const {
  ErrorBuffer error;
  TorchInfiniBinary binary{nullptr, 0};
  const int status = table_.compile(table_.context, source.c_str(), options.c_str(), &binary,
                                    error.text, sizeof error.text);
  TORCH_CHECK(status == 0, describe(), ": compile failed: ", error.str());
  TORCH_CHECK(binary.data != nullptr && binary.size > 0, describe(),
              ": compile succeeded but returned an empty binary");
  std::vector<uint8_t> bytes(static_cast<const uint8_t*>(binary.data),
                             static_cast<const uint8_t*>(binary.data) + binary.size);
  table_.free_binary(table_.context, &binary);
  return bytes;
}

std::string Plugin::runtimeSource() const {
  if (table_.get_runtime_source == nullptr) return "";
  const char* source = table_.get_runtime_source(table_.context);
  return source == nullptr ? "" : source;
}

std::vector<std::string> Plugin::passPipeline() const {
  if (table_.query_pass_pipeline == nullptr) return {};
  ErrorBuffer error;
  const char* const* names = nullptr;
  size_t count = 0;
  const int status =
      table_.query_pass_pipeline(table_.context, &names, &count, error.text, sizeof error.text);
  TORCH_CHECK(status == 0, describe(), ": query_pass_pipeline failed: ", error.str());
  TORCH_CHECK(count == 0 || names != nullptr, describe(), ": query_pass_pipeline reported ", count,
              " passes but no names");
  std::vector<std::string> pipeline;
  for (size_t i = 0; i < count; ++i) {
    TORCH_CHECK(names[i] != nullptr && *names[i] != '\0', describe(), ": pass ", i,
                " of its pipeline has no name");
    pipeline.emplace_back(names[i]);
  }
  return pipeline;
}

std::shared_ptr<Module> Plugin::load(const std::vector<uint8_t>& binary) const {
  ErrorBuffer error;
  void* handle = nullptr;
  const int status = table_.module_load(table_.context, binary.data(), binary.size(), &handle,
                                        error.text, sizeof error.text);
  TORCH_CHECK(status == 0 && handle != nullptr, describe(), ": module_load failed: ", error.str());
  return std::make_shared<Module>(shared_from_this(), handle);
}

Module::~Module() {
  ErrorBuffer error;
  const auto& table = plugin_->table();
  // A failed unload cannot be raised from a destructor; it is reported.
  if (table.module_unload(table.context, handle_, error.text, sizeof error.text) != 0)
    TORCH_WARN(plugin_->describe(), ": module_unload failed: ", error.str());
}

Kernel Module::kernel(const std::string& name) const {
  ErrorBuffer error;
  const auto& table = plugin_->table();
  void* function = nullptr;
  size_t num_args = 0;
  const int status = table.get_kernel_address(table.context, handle_, name.c_str(), &function,
                                              &num_args, error.text, sizeof error.text);
  TORCH_CHECK(status == 0 && function != nullptr, plugin_->describe(),
              ": get_kernel_address found no kernel '", name, "': ", error.str());
  return Kernel(shared_from_this(), name, function, num_args);
}

namespace {
std::atomic<uint64_t> launch_count{0};
}  // namespace

void Kernel::launch(const uint64_t* slots, size_t count, const std::array<uint32_t, 3>& grid,
                    const std::array<uint32_t, 3>& block, size_t shared_memory,
                    void* stream) const {
  // The plug-in checks the count too; this names the kernel without a call.
  TORCH_CHECK_VALUE(count == num_args_, "kernel '", name_, "' takes ", num_args_,
                    " arguments, got ", count);
  c10::SmallVector<void*, 16> args(count);
  for (size_t i = 0; i < count; ++i) args[i] = const_cast<uint64_t*>(&slots[i]);
  ErrorBuffer error;
  const auto& table = module_->plugin().table();
  const int status =
      table.launch_kernel(table.context, function_, args.data(), args.size(), grid.data(),
                          block.data(), shared_memory, stream, error.text, sizeof error.text);
  TORCH_CHECK(status == 0, module_->plugin().describe(), ": launch_kernel of '", name_,
              "' failed: ", error.str());
  launch_count.fetch_add(1, std::memory_order_relaxed);
}

uint64_t Kernel::launches() { return launch_count.load(std::memory_order_relaxed); }

}  // namespace torch_infini::compiler
