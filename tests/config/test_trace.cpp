// The trace (common/trace.h): a span is recorded with its start and duration when tracing
// is on for its whole life, and not at all when it began while tracing was off (its start
// was never read: recording it would draw a span from the trace's origin to now).
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "common/trace.h"

using gpt::Span;
using gpt::Trace;

TEST_CASE("trace: only spans that began with tracing on are recorded", "[trace]") {
  const std::string path = std::string(GPT_TEST_SCRATCH_DIR) + "/trace_test.json";
  Trace& trace = Trace::global();
  REQUIRE_FALSE(trace.enabled());
  {
    Span before("span_begun_before_tracing");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    trace.enable(path, 3);
    {
      Span during("span_while_tracing");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  trace.write();
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  CHECK(json.find("\"name\":\"span_while_tracing\"") != std::string::npos);
  CHECK(json.find("span_begun_before_tracing") == std::string::npos);
  CHECK(json.find("\"pid\":3") != std::string::npos);
  // The recorded span lasted at least the 2 ms slept inside it.
  const size_t dur = json.find("\"dur\":");
  REQUIRE(dur != std::string::npos);
  CHECK(std::stoll(json.substr(dur + 6)) >= 2000);
}
