#include "client/product_list.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kM = 8, kIn = 16, kOut = 12, kRank = 4;

ListOperand Region(uint64_t offset, std::vector<int64_t> shape,
                   DType dtype = DType::kBF16) {
  return ListOperand::InRegion("region", offset, std::move(shape), dtype);
}

// Where an operand of a built product lies: "r@offset" for the region,
// "s<product>@offset" for scratch.
std::string Place(const v1::Tensor& tensor) {
  if (tensor.has_scratch()) {
    return "s" + std::to_string(tensor.scratch().product()) + "@" +
           std::to_string(tensor.scratch().offset_bytes());
  }
  if (tensor.has_region()) {
    return tensor.region().region_id().substr(0, 1) + "@" +
           std::to_string(tensor.region().offset_bytes());
  }
  return "inline";
}

TEST(ProductListBuilderTest, BuildsTheListWithTheSessionAndNothingOfItsOwn) {
  ProductList list("session-1");
  EXPECT_EQ(
      list.Add(Region(0, {kM, kIn}), Region(4096, {kOut, kIn}),
               Region(8192, {kM, kOut}, DType::kFP32), {.transpose_b = true}),
      0u);
  EXPECT_EQ(list.Add(Region(8192, {kM, kOut}, DType::kBF16),
                     Region(12288, {kOut, kRank}), list.NewScratch({kM, kRank}),
                     {.alpha = 0.5f}),
            1u);
  v1::StreamOrder order;
  order.set_region_id("words");
  order.set_wait_value(3);
  list.set_stream_order(order);
  absl::StatusOr<v1::MatmulRequest> request = list.Build();
  ASSERT_TRUE(request.ok()) << request.status();

  EXPECT_EQ(request->session_id(), "session-1");
  EXPECT_EQ(request->stream_order().region_id(), "words");
  EXPECT_FALSE(request->has_a());
  EXPECT_FALSE(request->has_b());
  EXPECT_FALSE(request->has_c());
  EXPECT_FALSE(request->has_alpha());
  ASSERT_EQ(request->products_size(), 2);

  const v1::MatmulRequest& first = request->products(0);
  EXPECT_EQ(Place(first.a()), "r@0");
  EXPECT_EQ(Place(first.b()), "r@4096");
  EXPECT_EQ(Place(first.c()), "r@8192");
  EXPECT_THAT(first.b().shape(), ElementsAre(kOut, kIn));
  EXPECT_TRUE(first.b().strides().empty());
  EXPECT_EQ(first.a().dtype(), v1::DTYPE_BF16);
  EXPECT_EQ(first.c().dtype(), v1::DTYPE_FP32);
  EXPECT_EQ(first.out_dtype(), v1::DTYPE_FP32);
  EXPECT_FALSE(first.transpose_a());
  EXPECT_TRUE(first.transpose_b());
  EXPECT_FALSE(first.has_alpha());
  EXPECT_FALSE(first.has_beta());
  // Only the product's own fields: the list's are the outer request's.
  EXPECT_TRUE(first.session_id().empty());
  EXPECT_FALSE(first.has_stream_order());
  EXPECT_EQ(first.products_size(), 0);

  const v1::MatmulRequest& second = request->products(1);
  EXPECT_EQ(Place(second.c()), "s1@0");
  EXPECT_THAT(second.c().shape(), ElementsAre(kM, kRank));
  EXPECT_EQ(second.out_dtype(), v1::DTYPE_BF16);
  EXPECT_FLOAT_EQ(second.alpha(), 0.5f);
  EXPECT_FALSE(second.has_beta());
}

TEST(ProductListBuilderTest, WritesStridesWhenGiven) {
  ProductList list("s");
  ListOperand a = Region(0, {kM, kIn});
  a.strides = {kIn + 8, 1};
  list.Add(a, Region(4096, {kIn, kOut}), Region(8192, {kM, kOut}));
  absl::StatusOr<v1::MatmulRequest> request = list.Build();
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_THAT(request->products(0).a().strides(), ElementsAre(kIn + 8, 1));
}

// Build's refusals, each naming the product and operand at fault.
struct Refusal {
  std::string name;
  void (*build)(ProductList& list);
  std::string message;
};

// gtest prints a parameter in the test's ctest name: the case's name, not
// its bytes.
void PrintTo(const Refusal& refusal, std::ostream* os) { *os << refusal.name; }

class ProductListBuilderRefusalTest : public ::testing::TestWithParam<Refusal> {
};

TEST_P(ProductListBuilderRefusalTest, NamesTheProduct) {
  ProductList list("s");
  GetParam().build(list);
  absl::StatusOr<v1::MatmulRequest> request = list.Build();
  ASSERT_FALSE(request.ok());
  EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(request.status().message()),
              HasSubstr(GetParam().message));
}

// A valid first product (C in scratch of product 0), for refusals of the
// second.
void FirstIntoScratch(ProductList& list) {
  list.Add(Region(0, {kM, kIn}), Region(4096, {kIn, kOut}),
           list.NewScratch({kM, kOut}));
}

INSTANTIATE_TEST_SUITE_P(
    Refusals, ProductListBuilderRefusalTest,
    ::testing::Values(
        Refusal{"Empty", [](ProductList&) {}, "needs a product"},
        Refusal{"NoPlace",
                [](ProductList& list) {
                  ListOperand b = Region(0, {kIn, kOut});
                  b.region_id.clear();
                  list.Add(Region(0, {kM, kIn}), b, Region(0, {kM, kOut}));
                },
                "product 0: B: neither a region nor scratch"},
        Refusal{"BothPlaces",
                [](ProductList& list) {
                  ListOperand c = Region(0, {kM, kOut});
                  c.scratch_product = 0;
                  list.Add(Region(0, {kM, kIn}), Region(0, {kIn, kOut}), c);
                },
                "product 0: C: both a region and scratch"},
        Refusal{"Rank1",
                [](ProductList& list) {
                  list.Add(Region(0, {kIn}), Region(0, {kIn, kOut}),
                           Region(0, {1, kOut}));
                },
                "product 0: A: shape [16] must be"},
        Refusal{"ZeroDimension",
                [](ProductList& list) {
                  list.Add(Region(0, {kM, kIn}), Region(0, {kIn, 0}),
                           Region(0, {kM, 0}));
                },
                "product 0: B: shape [16, 0]"},
        Refusal{"StrideCount",
                [](ProductList& list) {
                  ListOperand a = Region(0, {kM, kIn});
                  a.strides = {1};
                  list.Add(a, Region(0, {kIn, kOut}), Region(0, {kM, kOut}));
                },
                "product 0: A: 1 strides for rank 2"},
        Refusal{"Fp32Input",
                [](ProductList& list) {
                  list.Add(Region(0, {kM, kIn}, DType::kFP32),
                           Region(0, {kIn, kOut}), Region(0, {kM, kOut}));
                },
                "product 0: A: inputs are bf16, not fp32"},
        Refusal{"ScratchOfItselfAsInput",
                [](ProductList& list) {
                  list.Add(ListOperand::InScratch(0, 0, {kM, kIn}),
                           Region(0, {kIn, kOut}), Region(0, {kM, kOut}));
                },
                "product 0: A: scratch of product 0, which has not run"},
        Refusal{"ScratchOfALaterProduct",
                [](ProductList& list) {
                  FirstIntoScratch(list);
                  list.Add(Region(0, {kM, kIn}), Region(0, {kIn, kOut}),
                           ListOperand::InScratch(2, 0, {kM, kOut}));
                },
                "product 1: C: scratch of product 2, which has not run"},
        Refusal{"ScratchOfARegionProduct",
                [](ProductList& list) {
                  list.Add(Region(0, {kM, kIn}), Region(0, {kIn, kOut}),
                           Region(0, {kM, kOut}));
                  list.Add(ListOperand::InScratch(0, 0, {kM, kOut}),
                           Region(0, {kOut, kRank}), Region(0, {kM, kRank}));
                },
                "product 1: A: scratch of product 0, whose C is not"},
        Refusal{"NewScratchWithBeta",
                [](ProductList& list) {
                  list.Add(Region(0, {kM, kIn}), Region(0, {kIn, kOut}),
                           list.NewScratch({kM, kOut}), {.beta = 1});
                },
                "product 0: C: a new scratch buffer is dense at offset 0"},
        Refusal{"NewScratchAtAnOffset",
                [](ProductList& list) {
                  list.Add(Region(0, {kM, kIn}), Region(0, {kIn, kOut}),
                           ListOperand::InScratch(0, 256, {kM, kOut}));
                },
                "product 0: C: a new scratch buffer is dense at offset 0"},
        Refusal{"InnerDimensions",
                [](ProductList& list) {
                  FirstIntoScratch(list);
                  // Without transpose_b, W [out, in] does not multiply.
                  list.Add(Region(0, {kM, kIn}), Region(0, {kOut, kIn}),
                           Region(0, {kM, kOut}));
                },
                "product 1: shapes do not multiply: op(A) [8, 16], op(B) "
                "[12, 16], C [8, 12]"},
        Refusal{"OutputShape",
                [](ProductList& list) {
                  list.Add(Region(0, {kIn, kM}), Region(0, {kIn, kOut}),
                           Region(0, {kIn, kOut}), {.transpose_a = true});
                },
                "product 0: shapes do not multiply"}),
    [](const ::testing::TestParamInfo<Refusal>& info) {
      return info.param.name;
    });

TEST(ProductListBuilderTest, ScratchMayBeWrittenAgainAndReadInPart) {
  ProductList list("s");
  FirstIntoScratch(list);  // product 0: [kM, kOut] into scratch 0
  // Accumulate into product 0's buffer, then read its second half's rows.
  list.Add(Region(0, {kM, kIn}), Region(0, {kIn, kOut}),
           ListOperand::InScratch(0, 0, {kM, kOut}), {.beta = 1});
  list.Add(ListOperand::InScratch(0, kM / 2 * kOut * 2, {kM / 2, kOut}),
           Region(0, {kOut, kRank}), Region(0, {kM / 2, kRank}));
  absl::StatusOr<v1::MatmulRequest> request = list.Build();
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(Place(request->products(1).c()), "s0@0");
  EXPECT_EQ(Place(request->products(2).a()), "s0@96");
}

// --- LoRA -----------------------------------------------------------------

// Projection p's operands at distinct offsets: p * 1 MiB + a slot each.
LoraWeights Weights(int p, float scale) {
  const uint64_t base = uint64_t(p) << 20;
  return {.w = Region(base + 0x1000, {kOut, kIn}),
          .a = Region(base + 0x2000, {kRank, kIn}),
          .b = Region(base + 0x3000, {kOut, kRank}),
          .scale = scale};
}

TEST(LoraForwardTest, ThreeProductsPerProjection) {
  const ListOperand x = Region(0, {kM, kIn});
  std::vector<LoraForwardProjection> projections;
  for (int p = 0; p < 2; ++p) {
    const uint64_t base = uint64_t(p) << 20;
    projections.push_back({.weights = Weights(p, 2.0f + p),
                           .xa = Region(base + 0x4000, {kM, kRank}),
                           .y = Region(base + 0x5000, {kM, kOut}, DType::kFP32),
                           .y_holds_bias = p == 1});
  }
  ProductList list("s");
  ASSERT_TRUE(AddLoraForward(list, x, projections).ok());
  absl::StatusOr<v1::MatmulRequest> request = list.Build();
  ASSERT_TRUE(request.ok()) << request.status();
  ASSERT_EQ(request->products_size(), 6);
  for (int p = 0; p < 2; ++p) {
    SCOPED_TRACE(p);
    const v1::MatmulRequest& xa = request->products(3 * p);
    const v1::MatmulRequest& base_product = request->products(3 * p + 1);
    const v1::MatmulRequest& adapter = request->products(3 * p + 2);
    auto at = [&](int offset) {
      return "r@" + std::to_string((p << 20) + offset);
    };
    // P1: xa = x A^T.
    EXPECT_EQ(Place(xa.a()), "r@0");
    EXPECT_EQ(Place(xa.b()), at(0x2000));
    EXPECT_EQ(Place(xa.c()), at(0x4000));
    EXPECT_TRUE(xa.transpose_b());
    EXPECT_FALSE(xa.has_beta());
    EXPECT_EQ(xa.out_dtype(), v1::DTYPE_BF16);
    // P2: y = x W^T, onto the bias for projection 1.
    EXPECT_EQ(Place(base_product.a()), "r@0");
    EXPECT_EQ(Place(base_product.b()), at(0x1000));
    EXPECT_EQ(Place(base_product.c()), at(0x5000));
    EXPECT_TRUE(base_product.transpose_b());
    EXPECT_EQ(base_product.has_beta(), p == 1);
    if (p == 1) EXPECT_FLOAT_EQ(base_product.beta(), 1.0f);
    EXPECT_EQ(base_product.out_dtype(), v1::DTYPE_FP32);
    // P3: y += s xa B^T.
    EXPECT_EQ(Place(adapter.a()), at(0x4000));
    EXPECT_EQ(Place(adapter.b()), at(0x3000));
    EXPECT_EQ(Place(adapter.c()), at(0x5000));
    EXPECT_TRUE(adapter.transpose_b());
    EXPECT_FLOAT_EQ(adapter.alpha(), 2.0f + p);
    EXPECT_FLOAT_EQ(adapter.beta(), 1.0f);
    EXPECT_EQ(adapter.out_dtype(), v1::DTYPE_FP32);
  }
}

TEST(LoraForwardTest, RefusesRank3AndNoProjection) {
  ProductList list("s");
  absl::Status none = AddLoraForward(list, Region(0, {kM, kIn}), {});
  EXPECT_THAT(std::string(none.message()), HasSubstr("needs a projection"));
  LoraForwardProjection projection = {.weights = Weights(0, 1),
                                      .xa = Region(0, {kM, kRank}),
                                      .y = Region(0, {kM, kOut})};
  absl::Status rank3 =
      AddLoraForward(list, Region(0, {2, kM, kIn}), {&projection, 1});
  EXPECT_EQ(rank3.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(rank3.message()),
              HasSubstr("x has shape [2, 8, 16]"));
  projection.weights.b = Region(0, {1, kOut, kRank});
  absl::Status b = AddLoraForward(list, Region(0, {kM, kIn}), {&projection, 1});
  EXPECT_THAT(std::string(b.message()), HasSubstr("projection 0: B has"));
  EXPECT_EQ(list.size(), 0u);
}

std::vector<LoraBackwardProjection> BackwardProjections(int count) {
  std::vector<LoraBackwardProjection> projections;
  for (int p = 0; p < count; ++p) {
    const uint64_t base = uint64_t(p) << 20;
    projections.push_back(
        {.weights = Weights(p, 2.0f + p),
         .xa = Region(base + 0x4000, {kM, kRank}),
         .dy = Region(base + 0x6000, {kM, kOut}),
         .da = Region(base + 0x7000, {kRank, kIn}, DType::kFP32),
         .db = Region(base + 0x8000, {kOut, kRank}, DType::kFP32)});
  }
  return projections;
}

TEST(LoraBackwardTest, WithoutDxThreeProductsPerProjection) {
  ProductList list("s");
  ASSERT_TRUE(
      AddLoraBackward(list, Region(0, {kM, kIn}), BackwardProjections(2)).ok());
  absl::StatusOr<v1::MatmulRequest> request = list.Build();
  ASSERT_TRUE(request.ok()) << request.status();
  ASSERT_EQ(request->products_size(), 6);
  for (int p = 0; p < 2; ++p) {
    SCOPED_TRACE(p);
    auto at = [&](int offset) {
      return "r@" + std::to_string((p << 20) + offset);
    };
    const int first = 3 * p;
    const std::string t = "s" + std::to_string(first) + "@0";
    // t = dy B into a new scratch buffer [M, rank], BF16.
    const v1::MatmulRequest& t_product = request->products(first);
    EXPECT_EQ(Place(t_product.a()), at(0x6000));
    EXPECT_EQ(Place(t_product.b()), at(0x3000));
    EXPECT_EQ(Place(t_product.c()), t);
    EXPECT_THAT(t_product.c().shape(), ElementsAre(kM, kRank));
    EXPECT_EQ(t_product.out_dtype(), v1::DTYPE_BF16);
    EXPECT_FALSE(t_product.transpose_a() || t_product.transpose_b());
    // dB = s dy^T xa.
    const v1::MatmulRequest& db = request->products(first + 1);
    EXPECT_EQ(Place(db.a()), at(0x6000));
    EXPECT_EQ(Place(db.b()), at(0x4000));
    EXPECT_EQ(Place(db.c()), at(0x8000));
    EXPECT_TRUE(db.transpose_a());
    EXPECT_FALSE(db.transpose_b());
    EXPECT_FLOAT_EQ(db.alpha(), 2.0f + p);
    EXPECT_FALSE(db.has_beta());
    EXPECT_EQ(db.out_dtype(), v1::DTYPE_FP32);
    // dA = s t^T x.
    const v1::MatmulRequest& da = request->products(first + 2);
    EXPECT_EQ(Place(da.a()), t);
    EXPECT_THAT(da.a().shape(), ElementsAre(kM, kRank));
    EXPECT_EQ(Place(da.b()), "r@0");
    EXPECT_EQ(Place(da.c()), at(0x7000));
    EXPECT_TRUE(da.transpose_a());
    EXPECT_FLOAT_EQ(da.alpha(), 2.0f + p);
  }
}

TEST(LoraBackwardTest, DxSumsOverProjections) {
  ProductList list("s");
  const ListOperand dx = Region(0x9000, {kM, kIn}, DType::kFP32);
  ASSERT_TRUE(
      AddLoraBackward(list, Region(0, {kM, kIn}), BackwardProjections(2), dx)
          .ok());
  absl::StatusOr<v1::MatmulRequest> request = list.Build();
  ASSERT_TRUE(request.ok()) << request.status();
  ASSERT_EQ(request->products_size(), 10);
  for (int p = 0; p < 2; ++p) {
    SCOPED_TRACE(p);
    const int first = 5 * p;
    const std::string t = "s" + std::to_string(first) + "@0";
    EXPECT_EQ(Place(request->products(first).c()), t);
    EXPECT_EQ(Place(request->products(first + 2).a()), t);
    // dx = dy W (dx += dy W after the first projection).
    const v1::MatmulRequest& base = request->products(first + 3);
    EXPECT_EQ(Place(base.a()), "r@" + std::to_string((p << 20) + 0x6000));
    EXPECT_EQ(Place(base.b()), "r@" + std::to_string((p << 20) + 0x1000));
    EXPECT_EQ(Place(base.c()), "r@36864");
    EXPECT_FALSE(base.transpose_a() || base.transpose_b());
    EXPECT_FALSE(base.has_alpha());
    EXPECT_EQ(base.has_beta(), p > 0);
    if (p > 0) EXPECT_FLOAT_EQ(base.beta(), 1.0f);
    EXPECT_EQ(base.out_dtype(), v1::DTYPE_FP32);
    // dx += s t A.
    const v1::MatmulRequest& adapter = request->products(first + 4);
    EXPECT_EQ(Place(adapter.a()), t);
    EXPECT_EQ(Place(adapter.b()), "r@" + std::to_string((p << 20) + 0x2000));
    EXPECT_EQ(Place(adapter.c()), "r@36864");
    EXPECT_FALSE(adapter.transpose_a() || adapter.transpose_b());
    EXPECT_FLOAT_EQ(adapter.alpha(), 2.0f + p);
    EXPECT_FLOAT_EQ(adapter.beta(), 1.0f);
  }
}

TEST(LoraBackwardTest, AppendsAfterWhatTheListHolds) {
  // A forward and the backward in one list: the backward's scratch
  // indices count the forward's products.
  ProductList list("s");
  const ListOperand x = Region(0, {kM, kIn});
  LoraForwardProjection forward = {.weights = Weights(0, 2),
                                   .xa = Region(0x4000, {kM, kRank}),
                                   .y = Region(0x5000, {kM, kOut})};
  ASSERT_TRUE(AddLoraForward(list, x, {&forward, 1}).ok());
  ASSERT_TRUE(AddLoraBackward(list, x, BackwardProjections(1)).ok());
  absl::StatusOr<v1::MatmulRequest> request = list.Build();
  ASSERT_TRUE(request.ok()) << request.status();
  ASSERT_EQ(request->products_size(), 6);
  EXPECT_EQ(Place(request->products(3).c()), "s3@0");
  EXPECT_EQ(Place(request->products(5).a()), "s3@0");
}

}  // namespace
}  // namespace matmul
