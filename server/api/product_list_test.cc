// Product lists (MatmulRequest.products) through ProductAdmission::Submit,
// the path of every transport, on the CPU backend: lists that chain
// through a region and through scratch and accumulate into their output,
// checked against an FP64 reference, and lists refused whole, with the
// product at fault named and nothing written or held.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/bf16.h"
#include "common/gemm/reference_gemm.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/api/matmul_service.h"
#include "server/backends/testing/gated_backend.h"
#include "server/execution/testing/test_lane.h"
#include "server/regions/testing/test_region.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

const PeerCredentials kOwner{.pid = 77, .uid = 1000, .gid = 1000};
constexpr uint16_t kPoison = 0x7fc1;  // a BF16 NaN

// A [rows, cols] matrix at a byte offset of the test's region.
struct Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t offset = 0;
  bool in_spare = false;  // in the test's second region
};

// One BF16 product of a list as the test builds it; scratch operands name
// the product whose scratch they are in.
struct Operand {
  Matrix matrix;
  int scratch = -1;  // >= 0: in that product's scratch, matrix.offset in it
};

v1::Tensor TensorOf(const Operand& operand, const std::string& region,
                    const std::string& spare) {
  v1::Tensor tensor;
  tensor.set_dtype(v1::DTYPE_BF16);
  tensor.add_shape(operand.matrix.rows);
  tensor.add_shape(operand.matrix.cols);
  if (operand.scratch >= 0) {
    tensor.mutable_scratch()->set_product(operand.scratch);
    tensor.mutable_scratch()->set_offset_bytes(operand.matrix.offset);
  } else {
    tensor.mutable_region()->set_region_id(operand.matrix.in_spare ? spare
                                                                   : region);
    tensor.mutable_region()->set_offset_bytes(operand.matrix.offset);
  }
  return tensor;
}

struct Answer {
  v1::MatmulRequest request;
  v1::MatmulResponse response;
  absl::Notification done;
  absl::Status status;
};

class ProductListTest : public ::testing::Test {
 protected:
  ProductListTest()
      : rng_(std::random_device{}()),
        metrics_(*ServerMetrics::Create("", 16, {})),
        registry_({}),
        session_(registry_.OpenSession("lists", kOwner)) {
    auto backend = std::make_unique<GatedBackend>(/*open=*/true);
    backend_ = backend.get();
    lanes_.push_back(MakeTestLane(std::move(backend), *metrics_, 0));
    service_ = std::make_unique<MatmulServiceImpl>(
        lanes_, *metrics_, registry_, in_flight_,
        MatmulServiceOptions{
            .admission = {.limits = {.max_list_products = 8,
                                     .max_list_scratch_bytes = 1 << 20}},
            .max_concurrent_requests = 64,
            .shm = {.prefix = "matmul-"}});
    released_ = std::make_shared<bool>(false);
    auto region = MakeTestRegion({.size = kRegionBytes, .released = released_});
    region_ = region.get();
    absl::StatusOr<std::string> id =
        registry_.Add(session_, kOwner, std::move(region));
    EXPECT_TRUE(id.ok()) << id.status();
    region_id_ = id.value_or("");
    auto spare = MakeTestRegion({.size = kRegionBytes, .object = "spare"});
    spare_ = spare.get();
    id = registry_.Add(session_, kOwner, std::move(spare));
    EXPECT_TRUE(id.ok()) << id.status();
    spare_id_ = id.value_or("");
    // Every byte poisoned: what no product writes stays NaN.
    for (TestRegion* region : {region_, spare_}) {
      auto* words = reinterpret_cast<uint16_t*>(region->data());
      for (int64_t i = 0; i < kRegionBytes / 2; ++i) words[i] = kPoison;
    }
  }
  ~ProductListTest() override {
    backend_->Open();
    lanes_.front().executor->Shutdown();
  }

  // Places a rows x cols matrix in the region, after the last one.
  Matrix Place(int64_t rows, int64_t cols) {
    Matrix matrix{rows, cols, next_offset_};
    next_offset_ += (rows * cols * 2 + 255) / 256 * 256;
    EXPECT_LE(next_offset_, static_cast<uint64_t>(kRegionBytes));
    return matrix;
  }
  // Fills `matrix` with fresh random values in [-1, 1].
  void Fill(const Matrix& matrix) {
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    auto* words = reinterpret_cast<uint16_t*>(region_->data() + matrix.offset);
    for (int64_t i = 0; i < matrix.rows * matrix.cols; ++i) {
      words[i] = FloatToBf16(value(rng_));
    }
  }
  Matrix Random(int64_t rows, int64_t cols) {
    Matrix matrix = Place(rows, cols);
    Fill(matrix);
    return matrix;
  }
  // The matrix as doubles, row-major.
  std::vector<double> Read(const Matrix& matrix) const {
    const TestRegion* region = matrix.in_spare ? spare_ : region_;
    const auto* words =
        reinterpret_cast<const uint16_t*>(region->data() + matrix.offset);
    std::vector<double> values(matrix.rows * matrix.cols);
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = Bf16ToFloat(words[i]);
    return values;
  }

  // Adds alpha * op(a) op(b) + beta * c to `request`'s list.
  void Add(v1::MatmulRequest& request, const Operand& a, const Operand& b,
           const Operand& c, bool transpose_a, bool transpose_b,
           float alpha = 1.0f, float beta = 0.0f) {
    v1::MatmulRequest* product = request.add_products();
    *product->mutable_a() = TensorOf(a, region_id_, spare_id_);
    *product->mutable_b() = TensorOf(b, region_id_, spare_id_);
    *product->mutable_c() = TensorOf(c, region_id_, spare_id_);
    product->set_transpose_a(transpose_a);
    product->set_transpose_b(transpose_b);
    if (alpha != 1.0f) product->set_alpha(alpha);
    if (beta != 0.0f) product->set_beta(beta);
  }

  std::unique_ptr<Answer> Run(v1::MatmulRequest request) {
    auto answer = std::make_unique<Answer>();
    answer->request = std::move(request);
    answer->request.set_session_id(session_);
    service_->admission().Submit({.caller = kOwner, .client_key = "test"},
                                 &answer->request, &answer->response,
                                 [&answer = *answer](absl::Status status) {
                                   answer.status = std::move(status);
                                   answer.done.Notify();
                                 });
    EXPECT_TRUE(answer->done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    return answer;
  }

  static constexpr int64_t kRegionBytes = 4 << 20;
  std::mt19937_64 rng_;
  std::unique_ptr<ServerMetrics> metrics_;
  RegionRegistry registry_;
  InFlightRequests in_flight_;
  std::vector<DeviceLane> lanes_;
  GatedBackend* backend_ = nullptr;
  std::unique_ptr<MatmulServiceImpl> service_;
  const std::string session_;
  std::shared_ptr<bool> released_;
  TestRegion* region_ = nullptr;
  std::string region_id_;
  // Stays registered: outputs that must outlive the first region.
  TestRegion* spare_ = nullptr;
  std::string spare_id_;
  uint64_t next_offset_ = 0;
};

// C = alpha * op(A) op(B) + beta * C in FP64, all row-major [rows, cols]
// as stored; op transposes.
std::vector<double> Product(const std::vector<double>& a, int64_t a_rows,
                            int64_t a_cols, bool transpose_a,
                            const std::vector<double>& b, int64_t b_rows,
                            int64_t b_cols, bool transpose_b, double alpha,
                            double beta, const std::vector<double>& c) {
  const int64_t m = transpose_a ? a_cols : a_rows;
  const int64_t k = transpose_a ? a_rows : a_cols;
  const int64_t n = transpose_b ? b_rows : b_cols;
  std::vector<double> out(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t l = 0; l < k; ++l) {
        const double x = transpose_a ? a[l * a_cols + i] : a[i * a_cols + l];
        const double y = transpose_b ? b[j * b_cols + l] : b[l * b_cols + j];
        sum += x * y;
      }
      out[i * n + j] = alpha * sum + (beta != 0.0 ? beta * c[i * n + j] : 0.0);
    }
  }
  return out;
}

std::vector<double> RoundedToBf16(std::vector<double> values) {
  for (double& v : values) v = Bf16ToFloat(FloatToBf16(static_cast<float>(v)));
  return values;
}

// A LoRA linear's forward and backward as the clients send them, on random
// shapes: y = x W^T + s (x A^T) B^T with x A^T kept, then dx = dy W +
// s (dy B) A, dB = s dy^T (x A^T), dA = s (dy B)^T x with dy B in scratch.
TEST_F(ProductListTest, LoraForwardAndBackwardMatchTheReference) {
  for (int round = 0; round < 3; ++round) {
    next_offset_ = 0;
    const int64_t t = 1 + rng_() % 40, in = 1 + rng_() % 48,
                  out = 1 + rng_() % 48, r = 1 + rng_() % 8;
    const float s = 0.5f + static_cast<float>(rng_() % 4);
    const Matrix x = Random(t, in), w = Random(out, in), a = Random(r, in),
                 b = Random(out, r), dy = Random(t, out);
    const Matrix xa = Place(t, r), y = Place(t, out), dx = Place(t, in),
                 db = Place(out, r), da = Place(r, in);
    v1::MatmulRequest forward;
    Add(forward, {x}, {a}, {xa}, false, true);
    Add(forward, {x}, {w}, {y}, false, true);
    Add(forward, {xa}, {b}, {y}, false, true, s, 1.0f);
    std::unique_ptr<Answer> f = Run(forward);
    ASSERT_TRUE(f->status.ok()) << f->status;
    EXPECT_FALSE(f->response.has_c());
    EXPECT_EQ(f->response.kernel(),
              "openblas_sgemm + openblas_sgemm + openblas_sgemm");

    const std::vector<double> xs = Read(x), ws = Read(w), as = Read(a),
                              bs = Read(b), dys = Read(dy);
    const std::vector<double> xa_ref =
        RoundedToBf16(Product(xs, t, in, false, as, r, in, true, 1, 0, {}));
    std::vector<double> y_ref =
        RoundedToBf16(Product(xs, t, in, false, ws, out, in, true, 1, 0, {}));
    y_ref = Product(xa_ref, t, r, false, bs, out, r, true, s, 1, y_ref);
    EXPECT_LT(RelativeError(Read(xa), xa_ref), 1e-2);
    EXPECT_LT(RelativeError(Read(y), y_ref), 1e-2);

    v1::MatmulRequest backward;
    const Operand scratch_t{{t, r, 0}, 0};  // dy B, product 0's scratch
    Add(backward, {dy}, {b}, scratch_t, false, false);
    Add(backward, {dy}, {w}, {dx}, false, false);
    Add(backward, scratch_t, {a}, {dx}, false, false, s, 1.0f);
    Add(backward, {dy}, {xa}, {db}, true, false, s);
    Add(backward, scratch_t, {x}, {da}, true, false, s);
    std::unique_ptr<Answer> g = Run(backward);
    ASSERT_TRUE(g->status.ok()) << g->status;

    const std::vector<double> dyb =
        RoundedToBf16(Product(dys, t, out, false, bs, out, r, false, 1, 0, {}));
    std::vector<double> dx_ref = RoundedToBf16(
        Product(dys, t, out, false, ws, out, in, false, 1, 0, {}));
    dx_ref = Product(dyb, t, r, false, as, r, in, false, s, 1, dx_ref);
    EXPECT_LT(RelativeError(Read(dx), dx_ref), 1e-2);
    EXPECT_LT(RelativeError(Read(db), Product(dys, t, out, true, Read(xa), t, r,
                                              false, s, 0, {})),
              1e-2);
    EXPECT_LT(RelativeError(Read(da), Product(dyb, t, r, true, xs, t, in, false,
                                              s, 0, {})),
              1e-2);
  }
}

// Scratch read at an offset with the reader's own shape, and a product
// that accumulates into an earlier product's scratch.
TEST_F(ProductListTest, ScratchIsReadAtOffsetsAndAccumulatedInto) {
  const int64_t m = 6, k = 5, n = 4;
  const Matrix a = Random(m, k), b = Random(k, n), e = Random(n, 3),
               out = Place(m / 2, 3);
  v1::MatmulRequest list;
  const Operand ab{{m, n, 0}, 0};
  Add(list, {a}, {b}, ab, false, false);              // S = A B
  Add(list, {a}, {b}, ab, false, false, 2.0f, 1.0f);  // S = 2 A B + S
  // The lower half of S's rows, at a byte offset.
  const Operand lower{{m / 2, n, static_cast<uint64_t>(m / 2 * n * 2)}, 0};
  Add(list, lower, {e}, {out}, false, false);
  std::unique_ptr<Answer> answer = Run(list);
  ASSERT_TRUE(answer->status.ok()) << answer->status;
  std::vector<double> s = RoundedToBf16(
      Product(Read(a), m, k, false, Read(b), k, n, false, 1, 0, {}));
  s = RoundedToBf16(
      Product(Read(a), m, k, false, Read(b), k, n, false, 2, 1, s));
  const std::vector<double> lower_s(s.begin() + m / 2 * n, s.end());
  EXPECT_LT(RelativeError(Read(out), Product(lower_s, m / 2, n, false, Read(e),
                                             n, 3, false, 1, 0, {})),
            1e-2);
}

// A bad list is refused before anything runs: the message names the
// product and what is wrong, the outputs of the good products before it
// keep their poison, and no region stays held.
TEST_F(ProductListTest, BadListsAreRefusedWholeAndLeaveNothingBehind) {
  const Matrix a = Random(4, 4), b = Random(4, 4), c = Place(4, 4),
               d = Place(4, 4);
  const Operand s0{{4, 4, 0}, 0};
  struct Case {
    std::string name;
    std::function<void(v1::MatmulRequest&)> build;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"too long",
       [&](v1::MatmulRequest& list) {
         for (int i = 0; i < 9; ++i) Add(list, {a}, {b}, {c}, false, false);
       },
       "the list has 9 products; at most 8"},
      {"reads a later product",
       [&](v1::MatmulRequest& list) {
         Add(list, {a}, {b}, {c}, false, false);
         Add(list, Operand{{4, 4, 0}, 2}, {b}, {d}, false, false);
         Add(list, {a}, {b}, s0, false, false);
       },
       "product 1: A: reads the scratch of product 2, which has not run yet"},
      {"scratch over the bound",
       [&](v1::MatmulRequest& list) {
         Add(list, {a}, {b}, {c}, false, false);
         Add(list, {Matrix{1024, 1, a.offset}}, {Matrix{1, 1024, b.offset}},
             Operand{{1024, 1024, 0}, 1}, false, false);
       },
       "product 1: C: scratch of 2097152 bytes"},
      {"shapes that do not chain",
       [&](v1::MatmulRequest& list) {
         Add(list, {a}, {b}, s0, false, false);
         Add(list, Operand{{4, 8, 0}, 0}, {Matrix{8, 4, b.offset}}, {c}, false,
             false);
       },
       "product 1: A: bytes [0, +64) reach outside the scratch of product 0 "
       "(32 bytes)"},
      {"inline operand",
       [&](v1::MatmulRequest& list) {
         Add(list, {a}, {b}, {c}, false, false);
         list.mutable_products(0)->mutable_b()->set_inline_data(
             std::string(32, '\1'));
       },
       "product 0: B: inline data in a product list"},
      {"unknown region",
       [&](v1::MatmulRequest& list) {
         Add(list, {a}, {b}, {c}, false, false);
         Add(list, {a}, {b}, {d}, false, false);
         list.mutable_products(1)->mutable_c()->mutable_region()->set_region_id(
             "gone");
       },
       "product 1: "},
  };
  for (const Case& test : cases) {
    SCOPED_TRACE(test.name);
    v1::MatmulRequest list;
    test.build(list);
    std::unique_ptr<Answer> answer = Run(list);
    EXPECT_THAT(answer->status.code(),
                test.name == "unknown region"
                    ? absl::StatusCode::kNotFound
                    : absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(answer->status.message(), HasSubstr(test.message));
    for (const Matrix& output : {c, d}) {
      for (double v : Read(output)) ASSERT_TRUE(std::isnan(v));
    }
  }
  absl::StatusOr<std::vector<RegionSummary>> regions =
      registry_.List(session_, kOwner);
  ASSERT_TRUE(regions.ok());
  ASSERT_EQ(regions->size(), 2u);
  for (const RegionSummary& region : *regions) {
    EXPECT_EQ(region.requests_in_flight, 0);
  }
}

// A region unregistered while a list that uses it waits to run: the
// release waits for the list, which runs whole. The outputs are in a
// region that stays, to be read after the first one is freed.
TEST_F(ProductListTest, ARegionFreedMidListIsReleasedAfterIt) {
  backend_->Close();
  const Matrix a = Random(8, 8), b = Random(8, 8);
  const Matrix c{8, 8, 0, true}, d{8, 8, 512, true};
  v1::MatmulRequest list;
  Add(list, {a}, {b}, {c}, false, false);
  Add(list, {c}, {b}, {d}, false, false);
  auto answer = std::make_unique<Answer>();
  answer->request = list;
  answer->request.set_session_id(session_);
  service_->admission().Submit({.caller = kOwner, .client_key = "test"},
                               &answer->request, &answer->response,
                               [&answer = *answer](absl::Status status) {
                                 answer.status = std::move(status);
                                 answer.done.Notify();
                               });
  absl::StatusOr<bool> deferred =
      registry_.Remove(session_, kOwner, region_id_);
  ASSERT_TRUE(deferred.ok()) << deferred.status();
  EXPECT_TRUE(*deferred);
  EXPECT_FALSE(*released_);
  // The inputs, read while their region still exists.
  const std::vector<double> as = Read(a), bs = Read(b);
  backend_->Open();
  ASSERT_TRUE(answer->done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(answer->status.ok()) << answer->status;
  const std::vector<double> ab =
      RoundedToBf16(Product(as, 8, 8, false, bs, 8, 8, false, 1, 0, {}));
  EXPECT_LT(RelativeError(Read(d),
                          Product(ab, 8, 8, false, bs, 8, 8, false, 1, 0, {})),
            1e-2);
  // Released once the list's request is gone, just after its answer.
  for (int i = 0; i < 1000 && !*released_; ++i)
    absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(*released_);
}

}  // namespace
}  // namespace matmul
