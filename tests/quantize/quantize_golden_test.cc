// Writers against the reference library: tests/fixtures/quantize/ holds, per case, the two modules blockspec
// wrote from input-h128 (scripts/make_quantize_golden.py) and golden.safetensors what compressed-tensors 0.20.1
// unpacks from them. Here: (1) blockspec still writes exactly those bytes, (2) the reference's codes, scales,
// zero points and dequantization equal our quantizer's, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "kernels/fp_formats.h"
#include "quantize/quantize.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;
const std::string kDir = std::string(BS_SOURCE_DIR) + "/tests/fixtures/quantize";

std::vector<float> f32_of(const Tensor& t) {
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = t.dtype() == DType::kF32 ? t.ptr<float>()[i]
           : t.dtype() == DType::kBF16 ? bf16_to_f32(t.ptr<uint16_t>()[i]) : f16_to_f32(t.ptr<uint16_t>()[i]);
  return v;
}

// The options the CLI builds from the case's flags.
QuantizeOptions options_of(const nlohmann::json& flags, const std::vector<std::string>& ignore) {
  QuantizeOptions o;
  o.ignore = ignore;
  o.progress = false;
  o.n_threads = 1;
  for (size_t i = 0; i < flags.size(); ++i) {
    const std::string f = flags[i];
    if (f == "--scheme") o.scheme = qscheme_from_name(flags[++i]);
    else if (f == "--asym") o.asym = true;
    else if (f == "--group") o.group = std::stoll(flags[++i].get<std::string>());
    else if (f == "--fp8-strategy") o.fp8_strategy = flags[++i];
    else if (f == "--format") o.format = flags[++i] == "gptq" ? QFormat::kGptq : QFormat::kCompressedTensors;
    else ADD_FAILURE() << "unknown flag " << f;
  }
  return o;
}

QuantSpec spec_of(const QuantizeOptions& o, DType wdt) {
  QuantSpec s;
  s.scheme = o.scheme;
  s.weight_dtype = wdt;
  s.scale_dtype = o.format == QFormat::kGptq ? DType::kF16 : wdt;
  s.bits = (o.scheme == QScheme::kW4A16 || o.scheme == QScheme::kNVFP4 || o.scheme == QScheme::kMXFP4) ? 4 : 8;
  s.is_float = o.scheme == QScheme::kFP8 || o.scheme == QScheme::kNVFP4 || o.scheme == QScheme::kMXFP4;
  s.sym = !o.asym;
  s.group = o.scheme == QScheme::kFP8 ? (o.fp8_strategy == "tensor" ? 0 : -1)
            : o.scheme == QScheme::kNVFP4 ? 16 : o.scheme == QScheme::kMXFP4 ? 32 : o.group;
  return s;
}

float element(const QuantWeight& qw, int64_t n, int64_t k) {
  const int8_t c = qw.q[n * qw.K + k];
  if (qw.spec.scheme == QScheme::kFP8) return e4m3_to_f32(static_cast<uint8_t>(c));
  if (qw.spec.scheme == QScheme::kNVFP4 || qw.spec.scheme == QScheme::kMXFP4) return e2m1_to_f32(static_cast<uint8_t>(c));
  return static_cast<float>(c);
}

TEST(QuantizeGolden, ReferenceUnpacksWhatWeWrote) {
  std::ifstream f(kDir + "/cases.json");
  const nlohmann::json cases = nlohmann::json::parse(f);
  std::vector<std::string> ignore;
  const nlohmann::json& keep = cases["keep_flags"];
  for (size_t i = 0; i + 1 < keep.size(); i += 2) ignore.push_back(keep[i + 1]);
  SafetensorsFile golden(kDir + "/golden.safetensors");
  SafetensorsCheckpoint input(kDir + "/input-h128");
  int n_cases = 0;
  for (const auto& [name, c] : cases["cases"].items()) {
    SCOPED_TRACE(name);
    QuantizeOptions o = options_of(c["flags"], ignore);
    o.in = kDir + "/" + c["input"].get<std::string>();
    o.out = (fs::temp_directory_path() / ("bs_quantize_golden_" + std::to_string(getpid()) + "_" + name)).string();
    fs::remove_all(o.out);
    quantize_model(o);
    // (1) the same bytes as the committed fixture, and the same quantization_config
    SafetensorsFile fixture(kDir + "/" + name + ".safetensors");
    SafetensorsCheckpoint out(o.out);
    for (const SafetensorsEntry& e : fixture.entries()) {
      ASSERT_TRUE(out.has(e.name)) << e.name;
      const Tensor a = fixture.tensor(e.name), b = out.tensor(e.name);
      EXPECT_TRUE(a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0)
          << e.name << " differs from the fixture";
    }
    std::ifstream cf(o.out + "/config.json");
    EXPECT_EQ(nlohmann::json::parse(cf)["quantization_config"], c["quantization_config"]);
    // (2) the reference's view equals our quantizer's
    for (const std::string mod : cases["modules"]) {
      SCOPED_TRACE(mod);
      const Tensor w = input.tensor(mod + ".weight");
      const std::vector<float> wf = f32_of(w);
      QuantWeight qw = make_params(spec_of(o, w.dtype()), wf.data(), w.dim(0), w.dim(1));
      quantize_rtn(qw, wf.data());
      const std::string g = name + "." + mod;
      const std::vector<float> codes = f32_of(golden.tensor(g + ".codes"));
      const int64_t R = golden.tensor(g + ".codes").dim(0), K = qw.K;
      int bad = 0;
      for (int64_t n = 0; n < R; ++n)
        for (int64_t k = 0; k < K; ++k)
          if (codes[n * K + k] != element(qw, n, k) && bad++ < 3)
            ADD_FAILURE() << "code (" << n << ", " << k << "): reference " << codes[n * K + k] << ", ours " << element(qw, n, k);
      const std::vector<float> scale = f32_of(golden.tensor(g + ".scale"));
      for (size_t i = 0; i < scale.size(); ++i) {
        const int64_t n = qw.n_groups ? static_cast<int64_t>(i) / qw.n_groups : 0, gi = qw.n_groups ? i % qw.n_groups : 0;
        const float ours = qw.spec.scheme == QScheme::kNVFP4   ? qw.scale[i]
                           : qw.spec.scheme == QScheme::kMXFP4 ? e8m0_to_f32(qw.scale_code[i])
                           : qw.spec.scheme == QScheme::kFP8 && qw.spec.group == 0 ? qw.scale[0]
                                                                                    : qw.group_scale(n, gi);
        if (scale[i] != ours && bad++ < 6) ADD_FAILURE() << "scale " << i << ": reference " << scale[i] << ", ours " << ours;
      }
      if (golden.has(g + ".zero")) {
        const std::vector<float> z = f32_of(golden.tensor(g + ".zero"));
        ASSERT_EQ(z.size(), qw.zero.size());
        for (size_t i = 0; i < z.size(); ++i)
          if (z[i] != static_cast<float>(qw.zero[i]) && bad++ < 9) ADD_FAILURE() << "zero " << i << ": " << z[i] << " vs " << qw.zero[i];
      } else {
        EXPECT_TRUE(qw.spec.sym);
      }
      if (golden.has(g + ".gscale")) EXPECT_EQ(golden.tensor(g + ".gscale").ptr<float>()[0], qw.global);
      const std::vector<float> deq = f32_of(golden.tensor(g + ".deq"));
      const std::vector<float> mine = dequantize_all(qw);
      EXPECT_EQ(std::memcmp(deq.data(), mine.data(), deq.size() * 4), 0) << "dequantization differs";
      EXPECT_EQ(bad, 0);
    }
    fs::remove_all(o.out);
    ++n_cases;
  }
  EXPECT_EQ(n_cases, 11);
}

}  // namespace
}  // namespace blockspec
