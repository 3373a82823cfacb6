// libFuzzer target: parse_safetensors_header over arbitrary bytes (the whole
// "file"), then parse_safetensors_index over the same bytes as text. Either
// may reject the input with blockspec::Error; anything else (a crash, a
// sanitizer report, another exception type) is a bug. Built and run by
// scripts/fuzz.sh; registered in CTest as fuzz_safetensors.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    blockspec::SafetensorsHeader h = blockspec::parse_safetensors_header(data, size, "fuzz.safetensors");
    // A header that validates must describe memory inside the input: touch
    // the first and last byte of every tensor so ASan checks the bounds.
    const uint8_t* base = data + 8 + h.header_len;
    volatile uint8_t sink = 0;
    for (const auto& e : h.entries)
      if (e.end > e.begin) sink = sink ^ base[e.begin] ^ base[e.end - 1];
  } catch (const blockspec::Error&) {
  }
  try {
    blockspec::parse_safetensors_index(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const blockspec::Error&) {
  }
  return 0;
}
