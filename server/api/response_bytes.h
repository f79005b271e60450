// The bytes of a unary Matmul answer. A large inline C is not copied into
// the message: the rest of the response is serialized as usual, and C's
// bytes follow as a slice that owns them, behind a second occurrence of
// field `c` that holds only `inline_data` (a protobuf parser merges the
// two occurrences of a message field into one, so the reader sees a single
// C). This saves a copy (and a fresh allocation) of the largest buffer a
// call moves.
#ifndef MATMUL_SERVER_API_RESPONSE_BYTES_H_
#define MATMUL_SERVER_API_RESPONSE_BYTES_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>

#include "matmul/v1/matmul.pb.h"

namespace matmul {

// Below this, C is serialized in place like any other field.
inline constexpr size_t kZeroCopyOutputBytes = size_t{64} << 10;

// Moves C's inline bytes (when they reach kZeroCopyOutputBytes) out of
// `response` and into the returned buffer.
grpc::ByteBuffer SerializeMatmulResponse(v1::MatmulResponse& response);

}  // namespace matmul

#endif  // MATMUL_SERVER_API_RESPONSE_BYTES_H_
