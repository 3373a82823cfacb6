// libFuzzer target: parse_gguf_header over arbitrary bytes (the whole
// "file"). It may reject the input with blockspec::Error; anything else (a
// crash, a sanitizer report, another exception type such as bad_alloc from a
// count we failed to bound) is a bug. Built and run by scripts/fuzz.sh;
// registered in CTest as fuzz_gguf; seeded with tests/fixtures/gguf/*.gguf.
#include <cstddef>
#include <cstdint>

#include "base/error.h"
#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    blockspec::GgufHeader h = blockspec::parse_gguf_header(data, size, "fuzz.gguf");
    // A header that validates must describe memory inside the input: touch
    // the first and last byte of every tensor so ASan checks the bounds.
    volatile uint8_t sink = 0;
    for (const auto& t : h.tensors) {
      const uint8_t* p = data + h.data_offset + t.offset;
      if (t.nbytes) sink = sink ^ p[0] ^ p[t.nbytes - 1];
    }
  } catch (const blockspec::Error&) {
  }
  return 0;
}
