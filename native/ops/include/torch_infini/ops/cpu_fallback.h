// The CPU fallback's policy: whether an ATen operator without an infini
// kernel runs on the CPU (its result landing on the infini device) or
// raises NotImplementedError.
//
// The state lives here, in C++, so the per-call path never enters Python and
// a LibTorch application gets the same policy. TORCH_INFINI_CPU_FALLBACK
// (warn | silent | off; default warn) is read once, on first use; Python
// (torch_infini.cpu_fallback) changes and reports it. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace torch_infini::ops {

enum class FallbackMode : uint8_t {
  Warn,    // run on the CPU, warn once per operator
  Silent,  // run on the CPU
  Off,     // NotImplementedError
};

FallbackMode fallbackMode();
void setFallbackMode(FallbackMode mode);
// "warn", "silent", "off"; parseFallbackMode throws c10::ValueError otherwise.
const char* fallbackModeName(FallbackMode mode);
FallbackMode parseFallbackMode(const std::string& name);

// Operator names are "aten::add" (every overload) or "aten::add.Tensor".
// An operator falls back when it is not denied and either the mode is not
// Off or it is allowed.
void setFallbackAllowed(const std::vector<std::string>& names);
void setFallbackDenied(const std::vector<std::string>& names);
std::vector<std::string> fallbackAllowed();
std::vector<std::string> fallbackDenied();

// Operators registered for infini only to send them to the fallback whole
// (PyTorch would otherwise decompose them: fallback/cpu_fallback.cpp); they are not
// infini kernels and torch_infini.operators() does not list them.
std::vector<std::string> fallbackRoutedOperators();
// Registers those routes (once; later calls return at once). They depend
// on every infini kernel being registered, so they are registered after
// the library has loaded, by torch_infini::init() and the Python module's
// import, never by a static initializer (whose order is the link order).
void registerFallbackRoutes();

// Stage every fallback call through pinned copies, as on devices whose
// memory is not host memory, even where it is: for tests of that path.
void setFallbackStagingForced(bool force);
bool fallbackStagingForced();

struct FallbackStats {
  int64_t calls = 0;
  double seconds = 0;        // wall time inside the fallback
  int64_t bytes_copied = 0;  // moved between infini and CPU memory
};
// Per operator ("aten::add.Tensor"), since the last reset.
std::map<std::string, FallbackStats> fallbackStats();
void resetFallbackStats();

}  // namespace torch_infini::ops
