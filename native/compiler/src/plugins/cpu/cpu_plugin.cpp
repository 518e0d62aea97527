// The built-in `cpu` compiler plug-in (host and InfiniRT cpu: device memory
// is host memory, or the host device's discrete mode, whose device memory
// host kernels reach through the runtime's kernel view). Toolchain: the
// system C++ compiler builds the generated source into a shared library.
// Runtime: dlopen/dlsym, and a launch maps its pointer arguments to where
// host kernels reach them (torch_infini_host_kernel_address) and queues the
// kernel's entry on the infini stream (torch_infini_launch_host_function).
//
// C++ source contract: for each kernel NAME the source defines
//   extern "C" int NAME__launch(void** args, char* error, size_t error_size);
//   extern "C" const size_t NAME__num_args;
//   extern "C" const char NAME__arg_kinds[];  // per argument: 'p' pointer,
//                                             // 'i' int64_t, 'f' double
// (torch_infini's code generator appends them to Inductor's kernel).
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "plugins/builtin_passes.h"
#include "torch_infini/compiler_plugin.h"

namespace {

using Entry = int (*)(void** args, char* error, size_t error_size);

int fail(char* error, size_t error_size, const std::string& message) {
  if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", message.c_str());
  return 1;
}

struct CpuModule;

struct CpuKernel {
  CpuModule* module;
  std::string name;
  Entry entry;
  size_t num_args;
  std::vector<bool> pointer;  // per argument: a pointer, mapped at launch
};

// A loaded library. Queued launches hold it, so unloading it while one is
// pending closes the library only after that launch ran.
struct CpuModule : std::enable_shared_from_this<CpuModule> {
  void* library = nullptr;
  std::mutex mutex;
  std::vector<std::unique_ptr<CpuKernel>> kernels;
  ~CpuModule() {
    if (library != nullptr) dlclose(library);
  }
};

struct Launch {
  std::shared_ptr<CpuModule> module;
  const CpuKernel* kernel;
  void** args = nullptr;  // args[i] points at slot i
  // Inline up to kInline arguments (one allocation per launch), else on the heap.
  static constexpr size_t kInline = 16;
  uint64_t inline_slots[kInline];
  void* inline_args[kInline];
  std::vector<uint64_t> heap_slots;
  std::vector<void*> heap_args;
};

struct Context {
  std::atomic<uint64_t> next_module{0};
};

std::string compilerCommand() {
  for (const char* variable : {"TORCH_INFINI_CXX", "CXX"})
    if (const char* value = std::getenv(variable); value != nullptr && *value != '\0') return value;
  return "c++";
}

std::string quoted(const std::string& path) { return "'" + path + "'"; }

bool writeFile(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  return static_cast<bool>(out);
}

// Runs `command` in a shell; returns its exit status and combined output.
int run(const std::string& command, std::string& output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The lines of a compiler's output that report errors, at most ~3000 bytes.
std::string errorLines(const std::string& output) {
  constexpr size_t kLimit = 3000;
  std::string lines;
  std::istringstream stream(output);
  for (std::string line; std::getline(stream, line);) {
    if (line.find("error") == std::string::npos) continue;
    if (lines.size() + line.size() + 1 > kLimit) {
      lines += "...\n";
      break;
    }
    lines += line + "\n";
  }
  return lines.empty() ? output.substr(0, kLimit) : lines;
}

// $TMPDIR, else /tmp.
std::string tempBase() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

// A new directory under tempBase(); "" with errno set on failure.
std::string makeTempDir(const char* prefix) {
  std::string pattern = tempBase() + "/" + prefix + "_XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  return mkdtemp(buffer.data()) == nullptr ? "" : std::string(buffer.data());
}

int compile(void* /*context*/, const char* source, const char* options, TorchInfiniBinary* binary,
            char* error, size_t error_size) {
  const std::string dir = makeTempDir("torch_infini_cpu_compile");
  if (dir.empty())
    return fail(error, error_size,
                std::string("cannot create a build directory: ") + std::strerror(errno));
  const std::string source_path = dir + "/kernel.cpp";
  const std::string library_path = dir + "/kernel.so";
  if (!writeFile(source_path, source, std::strlen(source)))
    return fail(error, error_size, "cannot write " + source_path);
  // The source before the options: libraries among them then count as
  // needed (linkers that drop unreferenced libraries read left to right).
  const std::string command = compilerCommand() + " " + quoted(source_path) + " " + options +
                              " -shared -fPIC -o " + quoted(library_path);
  std::string output;
  const int status = run(command, output);
  if (status != 0) {
    // The source and the compiler's whole output stay for the user to look
    // at; the message names them and quotes the errors (warnings from
    // headers can run to megabytes).
    const std::string log_path = dir + "/compiler_output.txt";
    writeFile(log_path, output.data(), output.size());
    return fail(error, error_size,
                "the C++ compiler failed (exit status " + std::to_string(status) +
                    "); the source is kept at " + source_path + "\ncommand: " + command +
                    "\nerrors (all output: " + log_path + "):\n" + errorLines(output));
  }
  std::ifstream in(library_path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(library_path.c_str());
  std::remove(source_path.c_str());
  rmdir(dir.c_str());
  if (bytes.empty()) return fail(error, error_size, "the compiler wrote an empty " + library_path);
  binary->data = std::malloc(bytes.size());
  if (binary->data == nullptr) return fail(error, error_size, "out of host memory");
  std::memcpy(binary->data, bytes.data(), bytes.size());
  binary->size = bytes.size();
  return 0;
}

void freeBinary(void* /*context*/, TorchInfiniBinary* binary) {
  std::free(binary->data);
  binary->data = nullptr;
  binary->size = 0;
}

const char* runtimeSource(void* /*context*/) { return ""; }

int moduleLoad(void* context, const void* binary, size_t size, void** module, char* error,
               size_t error_size) {
  auto* ctx = static_cast<Context*>(context);
  // A name never used before in this process (its pid and a counter in it):
  // dlopen returns an already loaded library for a path it has seen.
  std::string pattern = tempBase() + "/torch_infini_cpu_module_" + std::to_string(getpid()) + "_" +
                        std::to_string(ctx->next_module.fetch_add(1)) + "_XXXXXX.so";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  const int fd = mkstemps(buffer.data(), 3);
  if (fd < 0)
    return fail(error, error_size, "cannot create " + pattern + ": " + std::strerror(errno));
  close(fd);
  const std::string path = buffer.data();
  if (!writeFile(path, binary, size)) {
    std::remove(path.c_str());
    return fail(error, error_size, "cannot write " + path);
  }
  dlerror();
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  const char* why = library == nullptr ? dlerror() : nullptr;
  std::remove(path.c_str());  // mapped; the file is no longer needed
  if (library == nullptr)
    return fail(error, error_size,
                std::string("dlopen failed: ") + (why != nullptr ? why : "(no message)"));
  auto* owner = new std::shared_ptr<CpuModule>(std::make_shared<CpuModule>());
  (*owner)->library = library;
  *module = owner;
  return 0;
}

int moduleUnload(void* /*context*/, void* module, char* /*error*/, size_t /*error_size*/) {
  delete static_cast<std::shared_ptr<CpuModule>*>(module);  // closed after pending launches
  return 0;
}

int kernelAddress(void* /*context*/, void* module, const char* name, void** function,
                  size_t* num_args, char* error, size_t error_size) {
  CpuModule& m = **static_cast<std::shared_ptr<CpuModule>*>(module);
  const std::string base(name);
  dlerror();
  auto entry = reinterpret_cast<Entry>(dlsym(m.library, (base + "__launch").c_str()));
  const auto* count = static_cast<const size_t*>(dlsym(m.library, (base + "__num_args").c_str()));
  const auto* kinds = static_cast<const char*>(dlsym(m.library, (base + "__arg_kinds").c_str()));
  if (entry == nullptr || count == nullptr || kinds == nullptr)
    return fail(error, error_size,
                "the module defines no " + base + "__launch / " + base + "__num_args / " + base +
                    "__arg_kinds (the entry the cpu plug-in launches)");
  std::vector<bool> pointer;
  for (size_t i = 0; i < *count; ++i) {
    if (kinds[i] != 'p' && kinds[i] != 'i' && kinds[i] != 'f')
      return fail(error, error_size,
                  base + "__arg_kinds must give one of p, i, f for each of the " +
                      std::to_string(*count) + " arguments; argument " + std::to_string(i) +
                      " has " +
                      (kinds[i] == '\0' ? std::string("none") : std::string(1, kinds[i])));
    pointer.push_back(kinds[i] == 'p');
  }
  std::lock_guard<std::mutex> lock(m.mutex);
  m.kernels.push_back(
      std::make_unique<CpuKernel>(CpuKernel{&m, base, entry, *count, std::move(pointer)}));
  *function = m.kernels.back().get();
  *num_args = *count;
  return 0;
}

int runLaunch(void* data, char* error, size_t error_size) {
  auto* launch = static_cast<Launch*>(data);
  return launch->kernel->entry(launch->args, error, error_size);
}

void releaseLaunch(void* data) { delete static_cast<Launch*>(data); }

int launchKernel(void* /*context*/, void* function, void** args, size_t num_args,
                 const uint32_t* /*grid*/, const uint32_t* /*block*/, size_t /*shared_memory*/,
                 void* stream, char* error, size_t error_size) {
  // Grid and block do not apply: the kernel divides its work over the
  // host's threads itself (OpenMP).
  const auto* kernel = static_cast<const CpuKernel*>(function);
  if (num_args != kernel->num_args)
    return fail(error, error_size,
                "kernel '" + kernel->name + "' takes " + std::to_string(kernel->num_args) +
                    " arguments, got " + std::to_string(num_args));
  auto* launch = new Launch();
  launch->module = kernel->module->shared_from_this();
  launch->kernel = kernel;
  uint64_t* slots = launch->inline_slots;
  launch->args = launch->inline_args;
  if (num_args > Launch::kInline) {
    launch->heap_slots.resize(num_args);
    launch->heap_args.resize(num_args);
    slots = launch->heap_slots.data();
    launch->args = launch->heap_args.data();
  }
  for (size_t i = 0; i < num_args; ++i) {
    std::memcpy(&slots[i], args[i], sizeof(uint64_t));
    // A device address becomes the one the kernel reaches its bytes at
    // (discrete mode's kernel view; itself where device memory is host memory).
    if (kernel->pointer[i])
      slots[i] = reinterpret_cast<uint64_t>(
          torch_infini_host_kernel_address(reinterpret_cast<const void*>(slots[i])));
    launch->args[i] = &slots[i];
  }
  // The runtime owns `launch` from here on, failure included.
  return torch_infini_launch_host_function(stream, &runLaunch, launch, &releaseLaunch, error,
                                           error_size);
}

int passPipeline(void* /*context*/, const char* const** names, size_t* count, char* /*error*/,
                 size_t /*error_size*/) {
  *names = torch_infini::compiler::kBuiltinPassPipeline;
  *count = std::size(torch_infini::compiler::kBuiltinPassPipeline);
  return 0;
}

void destroy(void* context) { delete static_cast<Context*>(context); }

}  // namespace

extern "C" int torch_infini_cpu_compiler_plugin_init(TorchInfiniCompilerPlugin* table,
                                                     size_t table_size, char* error,
                                                     size_t error_size) {
  if (table_size < sizeof(TorchInfiniCompilerPlugin))
    return fail(error, error_size,
                "the table storage (" + std::to_string(table_size) + " bytes) is smaller than " +
                    std::to_string(sizeof(TorchInfiniCompilerPlugin)));
  auto* context = new Context();
  TorchInfiniCompilerPlugin t;
  std::memset(&t, 0, sizeof t);
  t.size = sizeof(TorchInfiniCompilerPlugin);
  t.abi_version = TORCH_INFINI_COMPILER_PLUGIN_ABI_VERSION;
  t.name = "cpu";
  t.device_type = "cpu";
  t.source_language = TORCH_INFINI_SOURCE_CPP;
  t.context = context;
  t.compile = &compile;
  t.free_binary = &freeBinary;
  t.get_runtime_source = &runtimeSource;
  t.module_load = &moduleLoad;
  t.module_unload = &moduleUnload;
  t.get_kernel_address = &kernelAddress;
  t.launch_kernel = &launchKernel;
  t.query_pass_pipeline = &passPipeline;
  t.destroy = &destroy;
  *table = t;
  return 0;
}
