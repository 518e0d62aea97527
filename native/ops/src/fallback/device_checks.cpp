// The generated table of device checks, looked up by name (device_checks.h).
#include "fallback/device_checks.h"

#include <algorithm>
#include <iterator>

namespace torch_infini::ops {
namespace {

struct Entry {
  std::string_view name;  // without the "aten::" namespace
  DeviceCheck check;
};

// Sorted by name (the generator sorts).
constexpr Entry kTable[] = {
#include "device_checks.inc"
};

}  // namespace

DeviceCheck deviceCheckOf(std::string_view qualified_name) {
  constexpr std::string_view kAten = "aten::";
  if (!qualified_name.starts_with(kAten)) return DeviceCheck::kNoCheck;
  const std::string_view name = qualified_name.substr(kAten.size());
  const Entry* it = std::lower_bound(std::begin(kTable), std::end(kTable), name,
                                     [](const Entry& e, std::string_view n) { return e.name < n; });
  return it != std::end(kTable) && it->name == name ? it->check : DeviceCheck::kNoCheck;
}

}  // namespace torch_infini::ops
