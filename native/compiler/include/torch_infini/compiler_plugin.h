/* The compiler plug-in interface: how torch.compile reaches a device type's
 * own toolchain (docs/compiler_plugin.md).
 *
 * A plug-in is a table of C functions in three groups, filled by the
 * plug-in's init function:
 *   toolchain          compile (generated source -> binary, with the
 *                      vendor's compiler), get_runtime_source (device-side
 *                      helpers the generated source includes)
 *   runtime strategy   module_load, module_unload, get_kernel_address,
 *                      launch_kernel (cuModuleLoadData / cuModuleGetFunction
 *                      / cuLaunchKernel shaped; a launch takes the infini
 *                      stream's native handle and is queued on it)
 *   compile strategy   query_pass_pipeline: the plug-in's graph passes, in
 *                      order. A pass acts on a PyTorch FX graph, which C
 *                      cannot hold, so each entry names a Python callable as
 *                      "package.module:function",
 *                      `function(graph_module) -> int` returning how many
 *                      rewrites it made (the apply_custom_pass step).
 *                      Applying them is not built yet: torch.compile refuses
 *                      a plug-in whose pipeline is not empty.
 *
 * Built-in plug-ins serve the device types torch_infini knows (the `cpu`
 * plug-in: host and InfiniRT cpu). A vendor ships an external one as a
 * shared library exporting TORCH_INFINI_COMPILER_PLUGIN_INIT_SYMBOL, named
 * in TORCH_INFINI_COMPILER_PLUGINS (paths separated by ':'); it replaces
 * the built-in plug-in of the device type it declares.
 *
 * Errors: a function returns 0 on success; otherwise it writes a message
 * (NUL-terminated, truncated to error_size) and returns non-zero. Nothing
 * here throws across the interface.
 *
 * Threads: compile may be called from several threads at once (torch.compile
 * builds a graph's kernels in parallel); the other functions too, from the
 * threads that run compiled graphs. A plug-in's library stays loaded until
 * the process exits.
 */
#ifndef TORCH_INFINI_COMPILER_PLUGIN_H_
#define TORCH_INFINI_COMPILER_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Incremented when a member changes meaning or moves; members added at the
 * end keep the version and grow `size`. */
#define TORCH_INFINI_COMPILER_PLUGIN_ABI_VERSION 1

/* The source languages a plug-in's compile may take. */
#define TORCH_INFINI_SOURCE_CPP "c++"       /* Inductor's C++ kernels */
#define TORCH_INFINI_SOURCE_TRITON "triton" /* Inductor's Triton kernels */

/* A compiled binary, owned by the plug-in until free_binary. */
typedef struct TorchInfiniBinary {
  void* data;
  size_t size;
} TorchInfiniBinary;

typedef struct TorchInfiniCompilerPlugin {
  /* sizeof(TorchInfiniCompilerPlugin) as the plug-in was built: the loader
   * refuses a table smaller than the members it reads. */
  size_t size;
  uint32_t abi_version;        /* TORCH_INFINI_COMPILER_PLUGIN_ABI_VERSION */
  const char* name;            /* e.g. "cpu", "vendor-x" */
  const char* device_type;     /* the InfiniRT device type served: "cpu", "nvidia", ... */
  const char* source_language; /* TORCH_INFINI_SOURCE_CPP or TORCH_INFINI_SOURCE_TRITON */
  void* context;               /* opaque, passed back to every function */

  /* ---- toolchain ---- */
  /* Compiles `source` (for C++: Inductor's kernel source, extended with one
   * launch entry per kernel, see below) with `options` (flags the code
   * generator requires, e.g. the vector ISA it generated for; may be ""). */
  int (*compile)(void* context, const char* source, const char* options, TorchInfiniBinary* binary,
                 char* error, size_t error_size);
  void (*free_binary)(void* context, TorchInfiniBinary* binary);
  /* Source the generated code includes before its own (may return ""). */
  const char* (*get_runtime_source)(void* context);

  /* ---- runtime strategy ---- */
  int (*module_load)(void* context, const void* binary, size_t size, void** module, char* error,
                     size_t error_size);
  int (*module_unload)(void* context, void* module, char* error, size_t error_size);
  /* The kernel `name` of `module`, and how many arguments it takes. */
  int (*get_kernel_address)(void* context, void* module, const char* name, void** function,
                            size_t* num_args, char* error, size_t error_size);
  /* Queues `function` on `stream` (the infini stream's native handle, NULL
   * for a runtime whose default stream is NULL). Each
   * of the `num_args` arguments is one 8-byte slot (a pointer, an int64_t,
   * or a double) that args[i] points to; the values are read before the
   * call returns. A count other than the kernel's is refused. */
  int (*launch_kernel)(void* context, void* function, void** args, size_t num_args,
                       const uint32_t grid[3], const uint32_t block[3], size_t shared_memory,
                       void* stream, char* error, size_t error_size);

  /* ---- compile strategy ---- */
  /* The graph passes, in order, as "package.module:function" names (see
   * above); *names stays valid while the plug-in is loaded. */
  int (*query_pass_pipeline)(void* context, const char* const** names, size_t* count, char* error,
                             size_t error_size);

  /* Releases `context` when the plug-in is unloaded (may be NULL). */
  void (*destroy)(void* context);
} TorchInfiniCompilerPlugin;

/* A plug-in's entry point: fills `table` (whose storage holds `table_size`
 * bytes, zeroed) and returns 0, or writes why it cannot and returns
 * non-zero. */
typedef int (*TorchInfiniCompilerPluginInit)(TorchInfiniCompilerPlugin* table, size_t table_size,
                                             char* error, size_t error_size);
#define TORCH_INFINI_COMPILER_PLUGIN_INIT_SYMBOL "torch_infini_compiler_plugin_init"

/* ---- what libtorch_infini offers plug-ins ---- */

/* The built-in cpu plug-in's init: an external plug-in for a host-addressable
 * device type may start from its table and replace members. */
int torch_infini_cpu_compiler_plugin_init(TorchInfiniCompilerPlugin* table, size_t table_size,
                                          char* error, size_t error_size);

/* Queues fn(data) on an infini stream (its native handle; NULL is a
 * runtime's default stream, as InfiniRT's and CUDA's), in stream order,
 * for kernels that run on the host's processors. Returns 0, or writes why
 * not. `release` (may be NULL) is called with `data` exactly once on every
 * path, failure included, when nothing will use `data` any more. An error
 * fn reports (non-zero return, message in its own buffer) is raised by the
 * stream's next synchronize where the stream queues work (async host), and
 * returned by this call where it runs the work at once (inline streams,
 * InfiniRT cpu, which first waits for the stream). */
typedef int (*TorchInfiniHostFunction)(void* data, char* error, size_t error_size);
int torch_infini_launch_host_function(void* stream, TorchInfiniHostFunction fn, void* data,
                                      void (*release)(void* data), char* error, size_t error_size);

/* Where a kernel running on the host's processors reaches the bytes of
 * device memory at `device_address`: the address itself where device memory
 * is host memory (host, InfiniRT cpu); in the host device's discrete mode
 * (TORCH_INFINI_HOST_MEMORY=discrete, where host code faults on device
 * addresses, as on an accelerator) the same bytes in the runtime's kernel
 * view. Any other address (host memory) is returned as it is. A plug-in
 * maps each pointer argument when it queues a launch. */
void* torch_infini_host_kernel_address(const void* device_address);

#ifdef __cplusplus
}
#endif

#endif /* TORCH_INFINI_COMPILER_PLUGIN_H_ */
