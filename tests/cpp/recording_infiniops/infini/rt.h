// A stand-in for InfiniRT's public header, as much of it as the InfiniOps
// kernel provider names (device types and dtypes), for
// tests/cpp/test_infiniops_mapping.cpp. Written from InfiniRT's interface;
// no InfiniRT code.
#pragma once

#include <cstdint>

namespace infini::rt {

enum class DataType : std::int8_t {
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64
};

class Device {
 public:
  enum class Type {
    kCpu = 0,
    kNvidia = 1,
    kCambricon = 2,
    kAscend = 3,
    kMetax = 4,
    kMoore = 5,
    kIluvatar = 6,
    kHygon = 7,
    kThead = 8,
    kMars = 9,
    kCount
  };

  Device() = default;
  Device(Type type, int index) : type_(type), index_(index) {}
  Type type() const { return type_; }
  int index() const { return index_; }

 private:
  Type type_ = Type::kCpu;
  int index_ = 0;
};

}  // namespace infini::rt
