// The binary the `nvidia` plug-in's compile returns and its module_load
// reads: a header, the kernel's name, then the cubin. Written by
// torch_infini/_triton.py (struct "<8sIIII"), read here; little endian.
//
//   char     magic[8]     "TINVCUB1"
//   uint32_t num_params   the kernel's parameters, Triton's scratch pointers included
//   uint32_t threads      threads per block (32 x num_warps)
//   uint32_t shared       dynamic shared memory, bytes
//   uint32_t name_size
//   char     name[name_size]
//   char     kinds[num_params - 2]   each argument's type: 'p' pointer, 'l'
//                                    int64, 'L' uint64, 'i' int32, 'u'
//                                    uint32, 'f' float, 'd' double
//   ...      the cubin
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace torch_infini::compiler::nvidia {

constexpr char kMagic[8] = {'T', 'I', 'N', 'V', 'C', 'U', 'B', '1'};
// Triton (3.3 on) appends two pointers to every kernel's parameters: global
// and profile scratch memory. torch_infini launches kernels that need none
// (their sizes are 0 at compile time) and passes NULL for both.
constexpr uint32_t kScratchParams = 2;

struct Binary {
  uint32_t num_params = 0;
  uint32_t threads = 0;
  uint32_t shared = 0;
  std::string name;
  std::string kinds;  // one per argument (Triton's scratch pointers excluded)
  std::string_view cubin;
};

// The parsed binary, or an error message in `error`.
inline bool parse(const void* data, size_t size, Binary& out, std::string& error) {
  constexpr size_t kHeader = sizeof kMagic + 4 * sizeof(uint32_t);
  const auto* bytes = static_cast<const char*>(data);
  if (size < kHeader || std::memcmp(bytes, kMagic, sizeof kMagic) != 0) {
    error = "not a binary of this plug-in (no TINVCUB1 header)";
    return false;
  }
  uint32_t fields[4];
  std::memcpy(fields, bytes + sizeof kMagic, sizeof fields);
  const uint32_t name_size = fields[3];
  out.num_params = fields[0];
  out.threads = fields[1];
  out.shared = fields[2];
  if (out.num_params < kScratchParams || out.threads == 0 || name_size == 0) {
    error = "a binary with no kernel parameters, threads or name";
    return false;
  }
  const size_t num_kinds = out.num_params - kScratchParams;
  if (size < kHeader + name_size + num_kinds) {
    error = "a truncated binary";
    return false;
  }
  out.name.assign(bytes + kHeader, name_size);
  out.kinds.assign(bytes + kHeader + name_size, num_kinds);
  if (out.kinds.find_first_not_of("plLiufd") != std::string::npos) {
    error = "a binary with an unknown argument kind in '" + out.kinds + "'";
    return false;
  }
  const size_t used = kHeader + name_size + num_kinds;
  out.cubin = std::string_view(bytes + used, size - used);
  return true;
}

}  // namespace torch_infini::compiler::nvidia
