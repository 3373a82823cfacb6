// The drafter data file: records round-trip, a reopened writer resumes
// (knows what is done, appends after it), a record cut short by a killed
// run is dropped, and a file of other widths or not ours is refused.
// Taps can be stored as bf16 (half the disk, what training reads back).
#include "train/draft_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "tensor/dtype.h"

namespace blockspec {
namespace {

namespace fs = std::filesystem;

std::string tmp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("bs_draft_data_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(DraftData, RoundTripResumeAndTruncation) {
  const std::string path = tmp_path("a.bin");
  fs::remove(path);
  const std::vector<int32_t> t1 = {5, 6, 7, 8}, t2 = {9, 10, 11};
  std::vector<float> taps1(3 * 2 * 4), taps2(2 * 2 * 4);
  for (size_t i = 0; i < taps1.size(); ++i) taps1[i] = 0.5f * static_cast<float>(i);
  for (size_t i = 0; i < taps2.size(); ++i) taps2[i] = -1.f - static_cast<float>(i);
  {
    DraftDataWriter w(path, 2, 4);
    EXPECT_TRUE(w.done().empty());
    w.append({7, 4, 2, 3, t1.data(), taps1.data()});
  }
  {
    DraftDataWriter w(path, 2, 4);  // resumes
    ASSERT_EQ(w.done(), std::vector<int64_t>{7});
    EXPECT_THROW(DraftDataWriter(path, 2, 4), Error);  // one writer at a time
    w.append({3, 3, 1, 2, t2.data(), taps2.data()});
  }
  const auto size_two = fs::file_size(path);
  {
    std::ofstream f(path, std::ios::app | std::ios::binary);  // a third record, killed half way
    const int64_t head[5] = {0x44524543, 1, 100, 10, 100};
    f.write(reinterpret_cast<const char*>(head), sizeof head);
    f.write(reinterpret_cast<const char*>(taps1.data()), 12);
  }
  {
    DraftData d(path);
    ASSERT_EQ(d.records().size(), 2u);  // the partial one is not a record
    EXPECT_EQ(d.n_taps(), 2);
    EXPECT_EQ(d.hidden(), 4);
    const DraftRecordView& a = d.records()[0];
    EXPECT_EQ(a.index, 7);
    EXPECT_EQ(a.n_prompt, 2);
    EXPECT_EQ(std::vector<int32_t>(a.tokens, a.tokens + a.n_tokens), t1);
    EXPECT_EQ(std::vector<float>(a.taps, a.taps + 24), taps1);
    const DraftRecordView& b = d.records()[1];
    EXPECT_EQ(b.index, 3);
    EXPECT_EQ(std::vector<float>(b.taps, b.taps + 16), taps2);
  }
  {
    DraftDataWriter w(path, 2, 4);  // drops the partial record
    EXPECT_EQ(w.done(), (std::vector<int64_t>{7, 3}));
    EXPECT_EQ(w.tokens_written(), 7);
  }
  EXPECT_EQ(fs::file_size(path), size_two);
  EXPECT_THROW(DraftDataWriter(path, 3, 4), Error);  // other taps
  {
    std::ofstream f(tmp_path("bad.bin"), std::ios::binary);
    f << "not a drafter data file, long enough for a header................................";
  }
  EXPECT_THROW(DraftData(tmp_path("bad.bin")), Error);
  EXPECT_THROW(DraftData(tmp_path("missing.bin")), Error);
  fs::remove(path);
  fs::remove(path + ".lock");
  fs::remove(tmp_path("bad.bin"));
}

}  // namespace
}  // namespace blockspec

namespace blockspec {
namespace {

// A bf16 file stores each tap rounded to bf16 (half the bytes); a resumed
// writer keeps the file's dtype whatever it was asked for, and
// append_taps_f32 widens a row range back to f32.
TEST(DraftData, Bf16TapsRoundAndResume) {
  const std::string path = tmp_path("draft_data_bf16.bin");
  fs::remove(path);
  const std::vector<int32_t> t1 = {1, 2, 3};
  const std::vector<float> taps1 = {1.0f, 1.00390625f + 1e-4f, -3.14159f, 65504.f, 1e-3f, -0.f};  // 3 rows x 2
  {
    DraftDataWriter w(path, 1, 2, TapDType::kBF16);
    w.append({0, 3, 1, 3, t1.data(), taps1.data()});
  }
  {
    DraftDataWriter w(path, 1, 2, TapDType::kF32);  // the file decides
    EXPECT_EQ(w.tap_dtype(), TapDType::kBF16);
    w.append({1, 3, 1, 3, t1.data(), taps1.data()});
  }
  EXPECT_EQ(fs::file_size(path), 64u + 2 * (40 + 12 + 6 * 2));
  DraftData d(path);
  ASSERT_EQ(d.records().size(), 2u);
  EXPECT_EQ(d.tap_dtype(), TapDType::kBF16);
  for (const DraftRecordView& r : d.records()) {
    EXPECT_EQ(r.taps, nullptr);
    std::vector<float> got;
    append_taps_f32(r, 2, 1, 2, got);  // rows 1 and 2
    ASSERT_EQ(got.size(), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], bf16_to_f32(f32_to_bf16(taps1[2 + i]))) << i;
    EXPECT_NE(got[0], taps1[2]);  // really rounded
  }
  EXPECT_THROW(parse_tap_dtype("fp16"), Error);
  fs::remove(path);
  fs::remove(path + ".lock");
}

}  // namespace
}  // namespace blockspec
