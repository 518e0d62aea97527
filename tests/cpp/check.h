// A tiny assertion helper for the C++ tests (no test framework ships with
// LibTorch). Each test executable is one ctest case; a failed CHECK prints
// where and exits non-zero.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>

// c10's logging headers (pulled in by ATen ones) define a CHECK of their
// own; the tests mean this one.
#ifdef CHECK
#undef CHECK
#endif
#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

// Passes when fn throws an exception of type E.
template <typename E>
bool throws(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
  return false;
}

inline int runTests(std::initializer_list<std::pair<const char*, void (*)()>> tests) {
  int n = 0;
  for (const auto& [name, fn] : tests) {
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: unexpected exception: %s\n", name, e.what());
      return 1;
    }
    std::printf("ok %d - %s\n", ++n, name);
  }
  return 0;
}
