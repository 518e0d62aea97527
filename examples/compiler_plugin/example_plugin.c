/* An out-of-tree compiler plug-in, as a vendor writes one
 * (docs/compiler_plugin.md): the built-in cpu table, renamed, with the
 * vendor's own compile step and its own graph pass ahead of the built-in
 * ones. Loaded with TORCH_INFINI_COMPILER_PLUGINS=/path/to/this library.
 *
 * A vendor with its own toolchain replaces compile/module_load/
 * get_kernel_address/launch_kernel with its compiler and driver calls
 * (cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel shaped); this one
 * keeps the cpu implementations and counts what it is asked to do. */
#include <stdio.h>
#include <string.h>

#include "torch_infini/compiler_plugin.h"

/* Read by the test (examples/compiler_plugin/run_example.py). */
int example_compiles = 0;
int example_launches = 0;

static TorchInfiniCompilerPlugin cpu; /* the built-in table we build on */

/* The toolchain: the vendor's flags after the code generator's. */
static int example_compile(void* context, const char* source, const char* options,
                           TorchInfiniBinary* binary, char* error, size_t error_size) {
  char flags[4096];
  if (snprintf(flags, sizeof flags, "%s -DEXAMPLE_VENDOR=1", options) >= (int)sizeof flags) {
    snprintf(error, error_size, "example-vendor: compile options too long");
    return 1;
  }
  ++example_compiles;
  return cpu.compile(context, source, flags, binary, error, error_size);
}

static int example_launch(void* context, void* function, void** args, size_t num_args,
                          const unsigned grid[3], const unsigned block[3], size_t shared_memory,
                          void* stream, char* error, size_t error_size) {
  ++example_launches;
  return cpu.launch_kernel(context, function, args, num_args, grid, block, shared_memory, stream,
                           error, error_size);
}

/* The compile strategy: the vendor's pass, then the built-in rewrites. */
/* clang-format off */
static const char* const pipeline[] = {
    "example_vendor_passes:fold_repeated_relu",
    "torch_infini.graph_passes.rms_norm:rewrite",
    "torch_infini.graph_passes.swiglu:rewrite",
    "torch_infini.graph_passes.causal_softmax:rewrite",
    "torch_infini.graph_passes.rotary:rewrite",
};
/* clang-format on */

static int example_pipeline(void* context, const char* const** names, size_t* count, char* error,
                            size_t error_size) {
  (void)context, (void)error, (void)error_size;
  *names = pipeline;
  *count = sizeof pipeline / sizeof pipeline[0];
  return 0;
}

int torch_infini_compiler_plugin_init(TorchInfiniCompilerPlugin* table, size_t table_size,
                                      char* error, size_t error_size) {
  int status = torch_infini_cpu_compiler_plugin_init(table, table_size, error, error_size);
  if (status != 0) return status;
  cpu = *table;
  table->name = "example-vendor";
  table->compile = example_compile;
  table->launch_kernel = example_launch;
  table->query_pass_pipeline = example_pipeline;
  return 0;
}
