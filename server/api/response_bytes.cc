#include "server/api/response_bytes.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/slice.h>

#include <memory>
#include <string>
#include <utility>

namespace matmul {
namespace {

using google::protobuf::internal::WireFormatLite;

// Appends the tag of length-delimited field `field` and the length.
void AppendLengthDelimited(int field, size_t length, std::string& out) {
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.WriteTag(WireFormatLite::MakeTag(
      field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
  coded.WriteVarint64(length);
}

void DeleteString(void* bytes) {
  // Takes back the ownership SerializeMatmulResponse handed to the slice.
  std::unique_ptr<std::string> owned(static_cast<std::string*>(bytes));
}

}  // namespace

grpc::ByteBuffer SerializeMatmulResponse(v1::MatmulResponse& response) {
  grpc::ByteBuffer buffer;
  if (!response.has_c() || !response.c().has_inline_data() ||
      response.c().inline_data().size() < kZeroCopyOutputBytes) {
    bool own_buffer = false;
    // Serialize fails only for messages over 2 GiB, which validation
    // refuses long before.
    (void)grpc::SerializationTraits<v1::MatmulResponse>::Serialize(
        response, &buffer, &own_buffer);
    return buffer;
  }
  auto output = std::make_unique<std::string>(
      std::move(*response.mutable_c()->mutable_inline_data()));
  response.mutable_c()->clear_inline_data();
  std::string head = response.SerializeAsString();
  // The second `c`: inline_data's tag and length, then the bytes.
  std::string inner;
  AppendLengthDelimited(v1::Tensor::kInlineDataFieldNumber, output->size(),
                        inner);
  AppendLengthDelimited(v1::MatmulResponse::kCFieldNumber,
                        inner.size() + output->size(), head);
  head += inner;
  const size_t size = output->size();
  void* data = output->data();
  grpc::Slice slices[2] = {
      grpc::Slice(head),
      // The slice owns the string from here on (DeleteString).
      grpc::Slice(data, size, DeleteString, output.release())};
  return grpc::ByteBuffer(slices, 2);
}

}  // namespace matmul
