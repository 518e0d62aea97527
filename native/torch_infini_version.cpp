// The shared library's own translation unit: the version it reports.
// Everything else comes whole from the runtime and ops static libraries.
namespace torch_infini {
extern "C" const char* torch_infini_version() { return TORCH_INFINI_VERSION; }
}  // namespace torch_infini
