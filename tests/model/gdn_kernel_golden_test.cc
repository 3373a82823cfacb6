// The Gated DeltaNet recurrence kernels (KernelTable::gdn_recurrent, every
// ISA) against two oracles nobody here wrote (tests/fixtures/hybrid/
// gdn_kernel.safetensors, scripts/make_hybrid_golden.py): FLA's
// naive_recurrent and naive_chunk gated delta rule and transformers'
// torch_recurrent_gated_delta_rule, from a random initial state, T = 150
// (d_v 24, not a multiple of 16), 65 and 1. The scalar twin and the AVX-512
// kernel agree bit for bit; heads run as one batch on the pool agree with
// heads run alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "kernels/gdn.h"

namespace blockspec {
namespace {

std::vector<float> floats(const SafetensorsFile& f, const std::string& n) {
  Tensor t = to_f32(f.tensor(n));
  return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.numel());
}

struct HeadsOut {
  std::vector<float> o, S;  // [T, nv, dv], [nv, dk, dv]
};

HeadsOut run(const KernelTable& kt, ThreadPool& pool, const SafetensorsFile& f, const std::string& tag,
             bool chunked = false) {
  const Tensor v = f.tensor(tag + ".v");
  const int64_t T = v.dim(1), nv = v.dim(2), dv = v.dim(3), dk = f.tensor(tag + ".q").dim(3);
  auto q = floats(f, tag + ".q"), k = floats(f, tag + ".k"), vv = floats(f, tag + ".v");
  const auto g = floats(f, tag + ".g"), beta = floats(f, tag + ".beta");
  HeadsOut r{std::vector<float>(T * nv * dv), floats(f, tag + ".s0")};
  const float div = static_cast<float>(std::sqrt(static_cast<double>(dk)));  // HF divides q by sqrt(d_k)
  for (float& x : q) x /= div;
  std::vector<float> alpha(g.size());
  for (size_t i = 0; i < g.size(); ++i) alpha[i] = std::exp(g[i]);
  std::vector<GdnHead> heads;
  for (int64_t h = 0; h < nv; ++h)
    heads.push_back(GdnHead{q.data() + h * dk, k.data() + h * dk, vv.data() + h * dv, alpha.data() + h, beta.data() + h,
                            r.o.data() + h * dv, r.S.data() + h * dk * dv, T, dk, dv, nv * dk, nv * dv, nv * dv, nv,
                            g.data() + h});
  if (chunked) {
    for (const GdnHead& hd : heads) kt.gdn_chunked(hd);
  } else {
    gdn_recurrent_heads(OpContext{&kt, &pool}, heads);
  }
  return r;
}

double max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

// Every ISA's kernel (recurrent or chunked form) bitwise equal to the scalar twin, and within 2e-6 of the three
// oracles (FLA's recurrent and chunked references, transformers' recurrent function).
void check_all(bool chunked) {
  SafetensorsFile f(std::string(BS_SOURCE_DIR) + "/tests/fixtures/hybrid/gdn_kernel.safetensors");
  ThreadPool pool(2);
  for (const std::string tag : {"a", "b", "c"}) {
    const HeadsOut base = run(select_kernels("ref"), pool, f, tag, chunked);
    for (const std::string& isa : available_isas()) {
      SCOPED_TRACE("case " + tag + " isa " + isa);
      const HeadsOut r = run(select_kernels(isa), pool, f, tag, chunked);
      EXPECT_EQ(0, std::memcmp(r.o.data(), base.o.data(), r.o.size() * 4)) << "outputs differ from the scalar twin";
      EXPECT_EQ(0, std::memcmp(r.S.data(), base.S.data(), r.S.size() * 4)) << "states differ from the scalar twin";
      for (const char* oracle : {"fla_rec", "fla_chunk", "hf_rec"}) {
        const double eo = max_abs(r.o, floats(f, tag + ".o_" + oracle));
        const double es = max_abs(r.S, floats(f, tag + ".s_" + oracle));
        EXPECT_LE(eo, 2e-6) << oracle;
        EXPECT_LE(es, 2e-6) << oracle;
        std::printf("[gdn %s] case %s isa %-6s vs %-9s max |do| %.2e  max |dS| %.2e\n", chunked ? "chunked" : "kernel",
                    tag.c_str(), isa.c_str(), oracle, eo, es);
      }
    }
  }
}

TEST(GdnKernel, MatchesFlaAndTransformersOnEveryIsaBitwiseAcrossIsas) { check_all(false); }

// The chunked form (prefill), over chunk boundaries (T = 150 = 64 + 64 + 22, 65) and a single token.
TEST(GdnKernel, ChunkedFormMatchesTheOraclesAndItsTwin) { check_all(true); }

}  // namespace
}  // namespace blockspec
