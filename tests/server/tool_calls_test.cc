// Tool-call parsers (issue 19): golden cases written after vLLM's parser
// tests (tests/tool_use/test_hermes_tool_parser.py, test_qwen3coder_tool_parser.py:
// the same kinds of model output; the expected strings are what vLLM's
// parsers return, i.e. Python's json.dumps, checked with CPython 3.11), the
// Python value rules they depend on, and the streamed pieces adding up to the
// whole answer for every way of cutting it.
#include <gtest/gtest.h>

#include <random>

#include "server/python_json.h"
#include "server/tool_calls.h"

namespace blockspec {
namespace {

using ojson = nlohmann::ordered_json;

TEST(PythonJson, DumpsAsCPython) {
  const ojson v = ojson::parse(R"({"a": 1, "b": [1.5, "x\ny"], "c": null, "d": true, "e": "Zürich\u0001\u2028"})");
  EXPECT_EQ(py_dumps(v), "{\"a\": 1, \"b\": [1.5, \"x\\ny\"], \"c\": null, \"d\": true, \"e\": \"Zürich\\u0001\u2028\"}");
  const std::vector<std::pair<double, const char*>> floats = {
      {3.14, "3.14"}, {1e16, "1e+16"}, {1.5e-07, "1.5e-07"}, {0.0001, "0.0001"}, {1e-05, "1e-05"},
      {1.0, "1.0"}, {123456789012345.6, "123456789012345.6"}, {-0.0, "-0.0"}, {1e22, "1e+22"},
      {2.5e-5, "2.5e-05"}, {1234567890123456.7, "1234567890123456.8"}, {0.1 + 0.2, "0.30000000000000004"},
      {5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"}, {-INFINITY, "-Infinity"}};
  for (const auto& [x, want] : floats) EXPECT_EQ(py_float_repr(x), want) << want;
  EXPECT_EQ(py_float_repr(std::nan("")), "NaN");
}

TEST(PythonJson, IntFloatAndLiteralRules) {
  EXPECT_EQ(py_int(" 42 "), "42");
  EXPECT_EQ(py_int("1_000"), "1000");
  EXPECT_EQ(py_int("-0"), "0");
  EXPECT_EQ(py_int("+7"), "7");
  EXPECT_EQ(py_int("007"), "7");
  EXPECT_EQ(py_int("123456789012345678901234567890"), "123456789012345678901234567890");
  for (const char* bad : {"1__0", "_1", "1_", "1.0", "", "abc", "0x10", "- 1"}) EXPECT_FALSE(py_int(bad)) << bad;
  EXPECT_EQ(py_float(" 1_0.5 "), 10.5);
  EXPECT_EQ(py_float(".5"), 0.5);
  EXPECT_EQ(py_float("5."), 5.0);
  EXPECT_EQ(py_float("-2.5e3"), -2500.0);
  EXPECT_EQ(py_float("Infinity"), INFINITY);
  EXPECT_TRUE(std::isnan(*py_float("nan")));
  for (const char* bad : {"e5", "", ".", "1e", "1,5", "0x1p3", "infx"}) EXPECT_FALSE(py_float(bad)) << bad;

  auto lit = [](const char* s) { auto v = py_literal_eval(s); return v ? py_dumps(*v) : std::string("<error>"); };
  EXPECT_EQ(lit("{'a': 1, 'b': (1, 2), 'c': None, 'd': True, 'e': 'it\\'s', 1: -2.5}"),
            R"({"a": 1, "b": [1, 2], "c": null, "d": true, "e": "it's", "1": -2.5})");
  EXPECT_EQ(lit("12345678901234567890123"), "12345678901234567890123");
  EXPECT_EQ(lit("-12345678901234567890123"), "-12345678901234567890123");
  EXPECT_EQ(lit("0x1F"), "31");
  EXPECT_EQ(lit("1e3"), "1000.0");
  EXPECT_EQ(lit("[1, 2,]"), "[1, 2]");
  EXPECT_EQ(lit("(3)"), "3");
  EXPECT_EQ(lit("'a' \"b\""), R"("ab")");
  for (const char* bad : {"hello", "inf", "1j", "012", "[1, 2", "{1, 2}", "f(1)", "{(1, 2): 3}"})
    EXPECT_EQ(lit(bad), "<error>") << bad;

  auto js = [](const char* s) { auto v = py_json_loads(s); return v ? py_dumps(*v) : std::string("<error>"); };
  EXPECT_EQ(js(R"({"a": NaN, "b": 1, "a": 2})"), R"({"a": 2, "b": 1})");
  EXPECT_EQ(js(R"("\ud83d\ude00")"), "\"😀\"");
  EXPECT_EQ(js(" [1.0, -0, 1E2] "), "[1.0, 0, 100.0]");
  for (const char* bad : {"[1, 2,]", "{'a': 1}", "01", "\"a\nb\"", "True", "{\"a\" 1}", ""}) EXPECT_EQ(js(bad), "<error>") << bad;
}

const ojson& weather_tools() {
  static const ojson t = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_current_weather", "description": "Get the current weather",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "state": {"type": "string"},
        "unit": {"type": "string", "enum": ["fahrenheit", "celsius"]}}, "required": ["city", "state"]}}},
    {"type": "function", "function": {"name": "calculate_area", "parameters": {"type": "object", "properties": {
        "shape": {"type": "string"}, "dimensions": {"type": "object"}, "precision": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "test_types", "parameters": {"type": "object", "properties": {
        "int_param": {"type": "integer"}, "float_param": {"type": "float"}, "num_param": {"type": "number"},
        "bool_param": {"type": "boolean"}, "str_param": {"type": "string"}, "obj_param": {"type": "object"},
        "arr_param": {"type": "array"}, "any_param": {"type": ["string", "null"]}, "untyped": {}}}}}
  ])");
  return t;
}

struct Case {
  const char* name;
  ToolCallFormat format;
  std::string text;
  std::optional<std::string> content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

std::vector<Case> cases() {
  const ToolCallFormat H = ToolCallFormat::hermes, Q = ToolCallFormat::qwen3_coder;
  const std::string dallas =
      "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX\n"
      "</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>";
  const std::string dallas_args = R"({"city": "Dallas", "state": "TX", "unit": "fahrenheit"})";
  const std::string h_dallas =
      "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"city\": \"Dallas\", \"state\": \"TX\", "
      "\"unit\": \"fahrenheit\"}}\n</tool_call>";
  return {
      {"hermes_no_call", H, "This is a test response without any tool calls", "This is a test response without any tool calls", {}},
      {"hermes_one", H, h_dallas, std::nullopt, {{"get_current_weather", dallas_args}}},
      {"hermes_content_first", H, "Sure! Let me check.\n" + h_dallas, "Sure! Let me check.\n", {{"get_current_weather", dallas_args}}},
      {"hermes_parallel", H,
       h_dallas + "\n<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"city\": \"Orlando\", \"state\": "
                  "\"FL\"}}\n</tool_call>",
       std::nullopt,
       {{"get_current_weather", dallas_args}, {"get_current_weather", R"({"city": "Orlando", "state": "FL"})"}}},
      {"hermes_unclosed_last", H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": [1, 2.50, null]}}",
       std::nullopt, {{"f", R"({"x": [1, 2.5, null]})"}}},
      {"hermes_order_unicode", H, "<tool_call>{\"arguments\": {\"b\": 1, \"a\": \"Zürich \\u00e9\"}, \"name\": \"g\"}</tool_call>",
       std::nullopt, {{"g", R"({"b": 1, "a": "Zürich é"})"}}},
      {"hermes_string_arguments", H, "<tool_call>{\"name\": \"g\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
       std::nullopt, {{"g", R"("{\"a\": 1}")"}}},
      {"hermes_malformed_is_content", H, "Hi <tool_call>{\"name\": \"g\", \"arguments\": {</tool_call>",
       "Hi <tool_call>{\"name\": \"g\", \"arguments\": {</tool_call>", {}},
      {"hermes_no_arguments_is_content", H, "<tool_call>{\"name\": \"g\"}</tool_call>", "<tool_call>{\"name\": \"g\"}</tool_call>", {}},
      {"hermes_text_after", H, h_dallas + "\nDone.", "\nDone.", {{"get_current_weather", dallas_args}}},
      {"qwen3_no_call", Q, "This is a test without tools", "This is a test without tools", {}},
      {"qwen3_one", Q, dallas, std::nullopt, {{"get_current_weather", dallas_args}}},
      {"qwen3_content_first", Q, "Sure! Let me check the weather for you." + dallas,
       "Sure! Let me check the weather for you.", {{"get_current_weather", dallas_args}}},
      {"qwen3_multiline_object", Q,
       "<tool_call>\n<function=calculate_area>\n<parameter=shape>\nrectangle\n</parameter>\n<parameter=dimensions>\n"
       "{\"width\": 10, \n \"height\": 20}\n</parameter>\n<parameter=precision>\n2\n</parameter>\n</function>\n</tool_call>",
       std::nullopt, {{"calculate_area", R"({"shape": "rectangle", "dimensions": {"width": 10, "height": 20}, "precision": 2})"}}},
      {"qwen3_parallel", Q,
       dallas + "\n" + "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nOrlando\n</parameter>\n"
                       "<parameter=state>\nFL\n</parameter>\n</function>\n</tool_call>",
       std::nullopt, {{"get_current_weather", dallas_args}, {"get_current_weather", R"({"city": "Orlando", "state": "FL"})"}}},
      {"qwen3_types", Q,
       "<tool_call>\n<function=test_types>\n<parameter=int_param>\n42\n</parameter>\n<parameter=float_param>\n3.14\n"
       "</parameter>\n<parameter=num_param>\n5.0\n</parameter>\n<parameter=bool_param>\nTrue\n</parameter>\n"
       "<parameter=str_param>\nhello world\n</parameter>\n<parameter=obj_param>\n{\"key\": \"value\"}\n</parameter>\n"
       "<parameter=arr_param>\n['a', 2]\n</parameter>\n<parameter=any_param>\n(1, 2)\n</parameter>\n"
       "<parameter=untyped>\n007\n</parameter>\n<parameter=extra>\n12\n</parameter>\n</function>\n</tool_call>",
       std::nullopt,
       {{"test_types", R"({"int_param": 42, "float_param": 3.14, "num_param": 5, "bool_param": true, "str_param": "hello world", "obj_param": {"key": "value"}, "arr_param": ["a", 2], "any_param": [1, 2], "untyped": "007", "extra": "12"})"}}},
      {"qwen3_bad_values_stay_strings", Q,
       "<tool_call>\n<function=test_types>\n<parameter=int_param>\nforty\n</parameter>\n<parameter=float_param>\ninf\n"
       "</parameter>\n<parameter=bool_param>\nyes\n</parameter>\n<parameter=obj_param>\n{not json}\n</parameter>\n"
       "<parameter=str_param>\nNULL\n</parameter>\n</function>\n</tool_call>",
       std::nullopt,
       {{"test_types", R"({"int_param": "forty", "float_param": "inf", "bool_param": false, "obj_param": "{not json}", "str_param": null})"}}},
      {"qwen3_keeps_inner_newlines", Q,
       "<tool_call>\n<function=write>\n<parameter=code>\n\ndef f():\n    return \"x\"\n\n</parameter>\n</function>\n</tool_call>",
       std::nullopt, {{"write", "{\"code\": \"\\ndef f():\\n    return \\\"x\\\"\\n\"}"}}},
      {"qwen3_no_tool_call_tags", Q,
       "<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX\n</parameter>\n</function>",
       std::nullopt, {{"get_current_weather", R"({"city": "Dallas", "state": "TX"})"}}},
      {"qwen3_missing_closing_tags", Q,
       "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n<parameter=state>\nTX\n</tool_call>",
       std::nullopt, {{"get_current_weather", R"({"city": "Dallas", "state": "TX"})"}}},
      {"qwen3_truncated", Q, "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDal",
       std::nullopt, {{"get_current_weather", R"({"city": "Dal"})"}}},
      {"qwen3_no_parameters", Q, "<tool_call>\n<function=now>\n</function>\n</tool_call>", std::nullopt, {{"now", "{}"}}},
      {"qwen3_unnamed_function_is_content", Q, "Look: <tool_call>\n<function=oops", "Look: <function=oops", {}},
      {"qwen3_block_without_function_is_content", Q, "<tool_call>\nnot a call\n</tool_call>", "\nnot a call\n", {}},
  };
}

int g_ids = 0;
std::string next_id() { return "call_" + std::to_string(g_ids++); }

void expect_split(const Case& c, const ToolCallSplit& got, ToolCallFormat f) {
  EXPECT_EQ(got.content, c.content) << c.name;
  ASSERT_EQ(got.calls.size(), c.calls.size()) << c.name;
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, c.calls[i].first) << c.name;
    EXPECT_EQ(got.calls[i].arguments, c.calls[i].second) << c.name;
    EXPECT_FALSE(got.calls[i].id.empty()) << c.name;
  }
}

TEST(ToolCalls, WholeAnswers) {
  for (const Case& c : cases()) {
    expect_split(c, extract_tool_calls(c.format, c.text, weather_tools(), next_id), c.format);
    if (c.format == ToolCallFormat::qwen3_coder)  // qwen3_xml reads the same format to the same calls
      expect_split(c, extract_tool_calls(ToolCallFormat::qwen3_xml, c.text, weather_tools(), next_id), c.format);
  }
}

// Feeds `cuts` pieces and rebuilds the answer from the deltas: content,
// then per call its header (id, name first) and argument pieces.
ToolCallSplit streamed(ToolCallFormat f, const std::string& text, const std::vector<size_t>& cuts) {
  ToolCallStream s(f, weather_tools(), next_id);
  std::vector<ToolCallDelta> pieces;
  size_t at = 0;
  for (size_t cut : cuts) {
    s.feed(text.substr(at, cut - at), pieces);
    at = cut;
  }
  s.feed(text.substr(at), pieces);
  s.finish(pieces);
  ToolCallSplit out;
  for (const ToolCallDelta& d : pieces) {
    if (d.index < 0) {
      EXPECT_FALSE(d.content.empty());
      out.content = out.content.value_or("") + d.content;
    } else if (d.index == static_cast<int>(out.calls.size())) {
      EXPECT_FALSE(d.id.empty());  // a call opens with its id and name
      out.calls.push_back({d.id, d.name, d.arguments});
    } else {
      EXPECT_EQ(d.index, static_cast<int>(out.calls.size()) - 1);  // calls stream one after another
      EXPECT_TRUE(d.id.empty());
      out.calls.back().arguments += d.arguments;
    }
  }
  EXPECT_EQ(s.n_calls(), static_cast<int>(out.calls.size()));
  return out;
}

TEST(ToolCalls, StreamedPiecesAddUpToTheWholeAnswer) {
  std::mt19937 rng(7);
  for (const Case& c : cases()) {
    for (ToolCallFormat f : {c.format, c.format == ToolCallFormat::hermes ? c.format : ToolCallFormat::qwen3_xml}) {
      for (size_t width = 1; width <= 9; ++width) {
        std::vector<size_t> cuts;
        for (size_t k = width; k < c.text.size(); k += width) cuts.push_back(k);
        expect_split(c, streamed(f, c.text, cuts), f);
      }
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<size_t> cuts;
        for (size_t k = 0; k < c.text.size(); ++k)
          if (rng() % 4 == 0) cuts.push_back(k);
        expect_split(c, streamed(f, c.text, cuts), f);
      }
    }
  }
}

// qwen3_xml sends a string value while it is generated; qwen3_coder waits
// for the parameter to end (as vLLM's two parsers stream).
TEST(ToolCalls, Qwen3XmlStreamsStringValuesAsTheyArrive) {
  const std::string head = "<tool_call>\n<function=write>\n<parameter=code>\nprint(1)\nprint(2)";
  for (ToolCallFormat f : {ToolCallFormat::qwen3_xml, ToolCallFormat::qwen3_coder}) {
    ToolCallStream s(f, weather_tools(), next_id);
    std::vector<ToolCallDelta> pieces;
    s.feed(head, pieces);
    std::string args;
    for (const ToolCallDelta& d : pieces) args += d.arguments;
    if (f == ToolCallFormat::qwen3_xml)
      EXPECT_EQ(args, "{\"code\": \"print(1)\\nprint(2)");
    else
      EXPECT_EQ(args, "{");
    s.feed("\n</parameter>\n</function>\n</tool_call>", pieces);
    args.clear();
    for (const ToolCallDelta& d : pieces) args += d.arguments;
    EXPECT_EQ(args, "{\"code\": \"print(1)\\nprint(2)\"}");
  }
  // A value that may still be "null" is held back.
  ToolCallStream s(ToolCallFormat::qwen3_xml, weather_tools(), next_id);
  std::vector<ToolCallDelta> pieces;
  s.feed("<function=f>\n<parameter=p>\nNul", pieces);
  std::string args;
  for (const ToolCallDelta& d : pieces) args += d.arguments;
  EXPECT_EQ(args, "{");
  s.feed("l\n</parameter></function>", pieces);
  args.clear();
  for (const ToolCallDelta& d : pieces) args += d.arguments;
  EXPECT_EQ(args, "{\"p\": null}");
}

TEST(ToolCalls, ParserNames) {
  EXPECT_EQ(tool_call_format("hermes"), ToolCallFormat::hermes);
  EXPECT_EQ(tool_call_format("qwen3_coder"), ToolCallFormat::qwen3_coder);
  EXPECT_EQ(tool_call_format("qwen3_xml"), ToolCallFormat::qwen3_xml);
  EXPECT_FALSE(tool_call_format("mistral"));
  EXPECT_FALSE(tool_call_format(""));
}

}  // namespace
}  // namespace blockspec
