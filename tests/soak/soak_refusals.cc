// The scenarios whose requests the daemon must refuse (malformed,
// unparseable, oversized) and the calls a client gives up on (cancel,
// deadline): each outcome is tallied against the codes it may have.
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "tests/soak/soak_worker.h"

namespace matmul::soak {

using absl::StatusCode;

// --- requests the daemon must refuse ----------------------------------------

void SoakWorker::Malformed() {
  absl::StatusOr<v1::MatmulRequest> valid =
      MakeRandomRequest(RandomSpec(2, 16), rng_);
  if (!valid.ok()) return tally().Fail("malformed", valid.status().ToString());
  v1::MatmulRequest request = *valid;
  StatusCode expected = StatusCode::kInvalidArgument;
  const char* what = "";
  switch (rng_() % 16) {
    case 0:
      what = "dtype unspecified";
      request.mutable_a()->set_dtype(v1::DTYPE_UNSPECIFIED);
      break;
    case 1:
      what = "unknown dtype";
      request.mutable_b()->set_dtype(static_cast<v1::DType>(77));
      break;
    case 2:
      what = "unknown out_dtype";
      request.set_out_dtype(static_cast<v1::DType>(-3));
      break;
    case 3:
      what = "zero dimension";
      request.mutable_a()->set_shape(0, 0);
      break;
    case 4:
      what = "negative dimension";
      request.mutable_b()->set_shape(1, -5);
      break;
    case 5:
      what = "rank 1";
      request.mutable_a()->clear_shape();
      request.mutable_a()->add_shape(4);
      break;
    case 6:
      what = "inner dimensions disagree";
      request.set_transpose_b(!request.transpose_b());
      request.mutable_b()->set_shape(request.b().shape_size() - 1, 1000003);
      break;
    case 7:
      what = "stride count";
      request.mutable_a()->clear_strides();
      request.mutable_a()->add_strides(1);
      break;
    case 8:
      what = "overflowing strides";
      request.mutable_a()->clear_strides();
      for (int i = 0; i < request.a().shape_size(); ++i) {
        request.mutable_a()->add_strides(std::numeric_limits<int64_t>::max() /
                                         2);
      }
      break;
    case 9:
      what = "negative stride";
      request.mutable_b()->clear_strides();
      for (int i = 0; i < request.b().shape_size(); ++i) {
        request.mutable_b()->add_strides(-1);
      }
      break;
    case 10:
      what = "inline data too short";
      request.mutable_a()->mutable_inline_data()->resize(
          request.a().inline_data().size() - 2);
      break;
    case 11:
      what = "beta without C";
      request.clear_c();
      request.set_beta(1.0f);
      break;
    case 12:
      what = "dimension over max_dimension";
      request.mutable_a()->set_shape(request.a().shape_size() - 2,
                                     int64_t{1} << 40);
      break;
    case 13:
      what = "missing A";
      request.clear_a();
      break;
    case 14: {
      what = "unknown region id";
      if (!EnsureSession()) return;
      expected = StatusCode::kNotFound;
      request.set_session_id(session_->session_id());
      request.mutable_a()->mutable_region()->set_region_id(
          absl::StrCat("no-such-region-", rng_()));
      break;
    }
    case 15: {
      what = "reference past the region's end";
      if (!EnsureSession()) return;
      request.set_session_id(session_->session_id());
      request.mutable_b()->mutable_region()->set_region_id(region_->id());
      request.mutable_b()->mutable_region()->set_offset_bytes(
          region_->size_bytes() - 2);
      break;
    }
  }
  // Over gRPC mostly; sometimes as a message of a MatmulStream, where the
  // error comes back in band.
  absl::Status status;
  if (rng_() % 4 == 0) {
    absl::StatusOr<std::vector<v1::MatmulResponse>> responses =
        client_->MatmulStream({request}, options_.call_timeout);
    status = !responses.ok()      ? responses.status()
             : responses->empty() ? absl::InternalError("no answer")
                                  : ResponseStatus(responses->front());
  } else {
    status = client_->Matmul(request, options_.call_timeout).status();
  }
  tally().Record("malformed", what, status, {expected});
}

void SoakWorker::Unparseable() {
  // proto3 strings must be UTF-8: the client sends these bytes, the daemon
  // cannot parse the message.
  v1::MatmulRequest garbage;
  garbage.set_session_id("\xff\xfe not UTF-8");
  garbage.set_request_id(1);
  if (rng_() % 2 == 0) {
    tally().Record("unparseable", "Matmul",
                   client_->Matmul(garbage, options_.call_timeout).status(),
                   {StatusCode::kInvalidArgument});
    return;
  }
  // In a stream, before a good request: the bad message gets an in-band
  // error (or ends the stream with INVALID_ARGUMENT), never a silent end.
  absl::StatusOr<v1::MatmulRequest> good =
      MakeRandomRequest(RandomSpec(1, options_.max_dim), rng_);
  if (!good.ok()) return tally().Fail("unparseable", good.status().ToString());
  good->set_request_id(2);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  auto stream = client_->stub().MatmulStream(&context);
  stream->Write(garbage);
  stream->Write(*good);
  stream->WritesDone();
  int answers = 0;
  for (v1::MatmulResponse response; stream->Read(&response);) {
    ++answers;
    if (response.request_id() == 2) {
      if (tally().Record("unparseable", "good message after a bad one",
                         ResponseStatus(response), {StatusCode::kOk})) {
        CheckInline("unparseable", *good, response);
      }
    } else {
      tally().Record("unparseable", "bad stream message",
                     ResponseStatus(response), {StatusCode::kInvalidArgument});
    }
  }
  const absl::Status status = FromGrpcStatus(stream->Finish());
  if (status.ok() && answers < 2) {
    tally().Fail("unparseable",
                 absl::StrCat("MatmulStream ended OK after ", answers,
                              " answers to 2 messages (one did not parse)"));
    return;
  }
  tally().Record("unparseable", "MatmulStream", status,
                 {StatusCode::kOk, StatusCode::kInvalidArgument});
}

void SoakWorker::Oversized() {
  if (options_.oversized_request != nullptr && rng_() % 2 == 0) {
    // A message over the daemon's limit: refused before it is parsed.
    absl::Status status;
    if (rng_() % 2 == 0) {
      status =
          client_->Matmul(*options_.oversized_request, options_.call_timeout)
              .status();
    } else {
      status = client_
                   ->MatmulStream({*options_.oversized_request},
                                  options_.call_timeout)
                   .status();
    }
    tally().Record("oversized", "request over max_message_bytes", status,
                   {StatusCode::kResourceExhausted});
    return;
  }
  // A small request whose answer would be over the limit: an FP32 C of
  // M x N with K = 1.
  const int64_t side =
      static_cast<int64_t>(std::sqrt(
          static_cast<double>(options_.server_max_message_bytes) / 4.0)) +
      64;
  if (side * side * 4 > (int64_t{1} << 30)) {
    return tally().Count("oversized", "skipped");  // limit too large to try
  }
  ProblemSpec spec;
  spec.m = side;
  spec.n = side;
  spec.k = 1;
  spec.out_dtype = DType::kFP32;
  absl::StatusOr<v1::MatmulRequest> request = MakeRandomRequest(spec, rng_);
  if (!request.ok()) {
    return tally().Fail("oversized", request.status().ToString());
  }
  tally().Record("oversized", "answer over max_message_bytes",
                 client_->Matmul(*request, options_.call_timeout).status(),
                 {StatusCode::kResourceExhausted});
}

// --- calls given up on -------------------------------------------------------

void SoakWorker::Cancel() {
  absl::StatusOr<v1::MatmulRequest> request = MakeRandomRequest(
      RandomSpec(options_.max_dim, 3 * options_.max_dim), rng_);
  if (!request.ok()) return tally().Fail("cancel", request.status().ToString());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  v1::MatmulResponse response;
  grpc::Status status;
  absl::Notification done;
  client_->stub().async()->Matmul(&context, &*request, &response,
                                  [&](grpc::Status s) {
                                    status = std::move(s);
                                    done.Notify();
                                  });
  absl::SleepFor(RandomDelay(absl::Milliseconds(3)));
  context.TryCancel();
  done.WaitForNotification();
  // Answered before the cancel arrived: then it must be right.
  if (tally().Record("cancel", "Matmul", FromGrpcStatus(status),
                     {StatusCode::kCancelled, StatusCode::kOk}) &&
      status.ok()) {
    CheckInline("cancel", *request, response);
  }
}

void SoakWorker::Deadline() {
  absl::StatusOr<v1::MatmulRequest> request = MakeRandomRequest(
      RandomSpec(options_.max_dim, 3 * options_.max_dim), rng_);
  if (!request.ok()) {
    return tally().Fail("deadline", request.status().ToString());
  }
  const absl::Duration kTimeouts[] = {
      absl::Nanoseconds(1), absl::Microseconds(10), absl::Microseconds(200),
      absl::Milliseconds(1), absl::Milliseconds(5)};
  const absl::Duration timeout = kTimeouts[rng_() % std::size(kTimeouts)];
  absl::StatusOr<v1::MatmulResponse> response =
      client_->Matmul(*request, timeout);
  // A product that ran in time is fine, if it is right.
  if (tally().Record(
          "deadline",
          absl::StrCat("Matmul with timeout ", absl::FormatDuration(timeout)),
          response.status(),
          {StatusCode::kDeadlineExceeded, StatusCode::kOk}) &&
      response.ok()) {
    CheckInline("deadline", *request, *response);
  }
}

}  // namespace matmul::soak
