#include "tokenizer/tokenizer.h"
#include <gtest/gtest.h>
TEST(Tokenizer, Smoke) {}
