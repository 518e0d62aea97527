// The shared library's own translation units: this one, the version it
// reports; torch_infini_api.cpp, init(). Everything else comes whole from
// the static libraries.
namespace torch_infini {
extern "C" const char* torch_infini_version() { return TORCH_INFINI_VERSION; }
}  // namespace torch_infini
