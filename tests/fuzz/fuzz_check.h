// What the fuzz targets share: a check that stops the run (libFuzzer keeps
// the input as a crash), and the walk over a strided operand that touches
// every element the backends will touch, so that an operand the checks let
// through but that reaches outside its memory is an AddressSanitizer report.
#ifndef MATMUL_TESTS_FUZZ_FUZZ_CHECK_H_
#define MATMUL_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "common/gemm/gemm_problem.h"
#include "google/protobuf/stubs/logging.h"

// A broken invariant: the input that got here is a bug.
#define FUZZ_CHECK(condition)                                          \
  do {                                                                 \
    if (!(condition)) {                                                \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, \
                   __LINE__, #condition);                              \
      std::abort();                                                    \
    }                                                                  \
  } while (false)

namespace matmul::fuzz {

// Protobuf logs every string field that is not UTF-8 as it parses; fuzz
// inputs are full of them, and the logging would drown the fuzzer's output.
inline void QuietProtobufLogs() { google::protobuf::SetLogHandler(nullptr); }

// Largest element offset of a [batch, rows, cols] operand with `strides`,
// in 128 bits so that the check itself cannot overflow.
inline __int128 LastElement(int64_t batch, int64_t rows, int64_t cols,
                            const Strides& strides) {
  return __int128{batch - 1} * strides.batch +
         __int128{rows - 1} * strides.row + __int128{cols - 1} * strides.col;
}

// Calls visit(byte_offset) for every element of the operand.
template <typename Visit>
void ForEachElement(int64_t batch, int64_t rows, int64_t cols,
                    const Strides& strides, size_t element_bytes, Visit visit) {
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        visit(static_cast<size_t>(b * strides.batch + i * strides.row +
                                  j * strides.col) *
              element_bytes);
      }
    }
  }
}

}  // namespace matmul::fuzz

#endif  // MATMUL_TESTS_FUZZ_FUZZ_CHECK_H_
