// The built-in cpu compiler plug-in through its C++ wrapper, as a C++
// developer uses it without Python: compile a kernel with its launch entry,
// load it, launch it on the current infini stream (inline or async host),
// and the refusals: a wrong argument count (by the wrapper and by the
// plug-in's own table), a compile error with the kept source.
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "check.h"
#include "torch_infini/compiler/plugin.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/stream.h"
#include "torch_infini/torch_infini.h"

namespace compiler = torch_infini::compiler;
namespace rt = torch_infini::runtime;

namespace {

constexpr const char* kSource = R"(
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
extern "C" const size_t twice__num_args = 3;
extern "C" const char twice__arg_kinds[] = "ppi";
extern "C" int twice__launch(void** args, char* error, size_t error_size) {
  const float* in = *static_cast<const float**>(args[0]);
  float* out = *static_cast<float**>(args[1]);
  const int64_t n = *static_cast<const int64_t*>(args[2]);
  if (n < 0) {
    std::snprintf(error, error_size, "negative size %lld", static_cast<long long>(n));
    return 1;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * 2.0f;
  return 0;
}
)";

std::string messageOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

void* currentStream() { return torch_infini::nativeStream(torch_infini::currentStream(0)); }

void testCompileLoadLaunch() {
  auto plugin = compiler::pluginFor("cpu");
  CHECK(plugin->name() == "cpu" && plugin->origin() == "built-in");
  CHECK(plugin->sourceLanguage() == TORCH_INFINI_SOURCE_CPP);
  const std::vector<uint8_t> binary = plugin->compile(kSource, "-O1 -std=c++17");
  CHECK(!binary.empty());
  auto module = plugin->load(binary);
  const compiler::Kernel kernel = module->kernel("twice");
  CHECK(kernel.numArgs() == 3);

  rt::DeviceRuntime& runtime = rt::selectedRuntime();
  constexpr int64_t n = 1000;
  // Device memory reached as a host program must (copies): in discrete mode
  // (TORCH_INFINI_HOST_MEMORY=discrete) the plug-in maps the pointer
  // arguments to where the kernel reaches them, and a direct access faults.
  auto* in = static_cast<float*>(runtime.malloc(0, n * sizeof(float)));
  auto* out = static_cast<float*>(runtime.malloc(0, n * sizeof(float)));
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  runtime.memcpy(in, host.data(), n * sizeof(float), rt::MemcpyKind::HostToDevice);
  std::vector<uint64_t> slots = {reinterpret_cast<uint64_t>(in), reinterpret_cast<uint64_t>(out),
                                 static_cast<uint64_t>(n)};
  kernel.launch(slots, {1, 1, 1}, {1, 1, 1}, 0, currentStream());
  runtime.synchronizeStream(currentStream());
  std::vector<float> result(n);
  runtime.memcpy(result.data(), out, n * sizeof(float), rt::MemcpyKind::DeviceToHost);
  for (int64_t i = 0; i < n; ++i) CHECK(result[i] == 2.0f * static_cast<float>(i));

  // A kernel's error: raised at the launch (inline) or the next synchronize.
  std::vector<uint64_t> negative = slots;
  const int64_t minus_one = -1;
  std::memcpy(&negative[2], &minus_one, sizeof minus_one);
  const std::string error = messageOf([&] {
    kernel.launch(negative, {1, 1, 1}, {1, 1, 1}, 0, currentStream());
    runtime.synchronizeStream(currentStream());
  });
  CHECK(error.find("negative size -1") != std::string::npos);
  runtime.free(0, in);
  runtime.free(0, out);
}

void testWrongArgumentCountIsRefused() {
  auto plugin = compiler::pluginFor("cpu");
  auto module = plugin->load(plugin->compile(kSource, "-O1 -std=c++17"));
  const compiler::Kernel kernel = module->kernel("twice");
  const std::string wrapper =
      messageOf([&] { kernel.launch({0, 0}, {1, 1, 1}, {1, 1, 1}, 0, currentStream()); });
  CHECK(wrapper.find("kernel 'twice' takes 3 arguments, got 2") != std::string::npos);

  // The plug-in's own table refuses it too, naming the kernel.
  const TorchInfiniCompilerPlugin& table = plugin->table();
  void* function = nullptr;
  size_t num_args = 0;
  char error[512] = "";
  void* handle = nullptr;
  const std::vector<uint8_t> binary = plugin->compile(kSource, "-O1 -std=c++17");
  CHECK(table.module_load(table.context, binary.data(), binary.size(), &handle, error,
                          sizeof error) == 0);
  CHECK(table.get_kernel_address(table.context, handle, "twice", &function, &num_args, error,
                                 sizeof error) == 0);
  uint64_t value = 0;
  void* args[] = {&value};
  const uint32_t dims[3] = {1, 1, 1};
  CHECK(table.launch_kernel(table.context, function, args, 1, dims, dims, 0, currentStream(), error,
                            sizeof error) != 0);
  CHECK(std::string(error).find("kernel 'twice' takes 3 arguments, got 1") != std::string::npos);
  CHECK(table.module_unload(table.context, handle, error, sizeof error) == 0);

  const std::string missing = messageOf([&] { module->kernel("thrice"); });
  CHECK(missing.find("found no kernel 'thrice'") != std::string::npos);
}

// The plug-in maps pointer arguments by the kinds the module declares: a
// module that declares none, or one the plug-in does not know, is refused at
// lookup (a guess could hand a kernel a device address it cannot reach).
void testArgumentKindsAreRequired() {
  auto plugin = compiler::pluginFor("cpu");
  std::string without(kSource);
  const std::string declaration = "extern \"C\" const char twice__arg_kinds[] = \"ppi\";\n";
  CHECK(without.find(declaration) != std::string::npos);
  without.erase(without.find(declaration), declaration.size());
  auto module = plugin->load(plugin->compile(without, "-O1 -std=c++17"));
  const std::string missing = messageOf([&] { module->kernel("twice"); });
  CHECK(missing.find("defines no twice__launch / twice__num_args / twice__arg_kinds") !=
        std::string::npos);

  std::string unknown(kSource);
  unknown.replace(unknown.find("\"ppi\""), 5, "\"pxi\"");
  auto other = plugin->load(plugin->compile(unknown, "-O1 -std=c++17"));
  const std::string refused = messageOf([&] { other->kernel("twice"); });
  CHECK(refused.find("argument 1 has x") != std::string::npos);
}

void testCompileErrorKeepsTheSource() {
  auto plugin = compiler::pluginFor("cpu");
  const std::string error = messageOf([&] { plugin->compile("int broken( {\n", "-std=c++17"); });
  CHECK(error.find("compile failed: the C++ compiler failed") != std::string::npos);
  const std::string marker = "the source is kept at ";
  const size_t at = error.find(marker);
  CHECK(at != std::string::npos);
  const std::string path =
      error.substr(at + marker.size(), error.find('\n', at) - at - marker.size());
  std::ifstream kept(path);
  const std::string text((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  CHECK(text == "int broken( {\n");
  std::remove(path.c_str());
  std::remove(path.substr(0, path.rfind('/')).c_str());
}

void testUnknownDeviceType() {
  CHECK(throws<c10::NotImplementedError>([] { compiler::pluginFor("vx"); }));
}

}  // namespace

int main() {
  torch_infini::init();
  return runTests({{"compile, load, launch", testCompileLoadLaunch},
                   {"wrong argument count", testWrongArgumentCountIsRefused},
                   {"argument kinds are required", testArgumentKindsAreRequired},
                   {"compile error keeps the source", testCompileErrorKeepsTheSource},
                   {"unknown device type", testUnknownDeviceType}});
}
