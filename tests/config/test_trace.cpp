// The trace (common/trace.h): a span is recorded with its start and duration when tracing
// is on for its whole life, and not at all when it began while tracing was off (its start
// was never read: recording it would draw a span from the trace's origin to now).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
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

// The lane ("tid") of the line of the event named `name`, -1 when there is none.
static int lane_of(const std::string& json, const std::string& name) {
  const size_t at = json.find("\"name\":\"" + name + "\"");
  if (at == std::string::npos) return -1;
  const size_t tid = json.find("\"tid\":", at);
  return tid == std::string::npos ? -1 : std::stoi(json.substr(tid + 6));
}

TEST_CASE("trace: a span names its lane, or takes its thread's", "[trace]") {
  const std::string path = std::string(GPT_TEST_SCRATCH_DIR) + "/trace_lanes.json";
  Trace& trace = Trace::global();
  trace.enable(path, 0);
  { Span main_thread("lane_of_main_thread"); }
  // A communication thread's own spans, and the ops it runs (they name no lane), go to its
  // row; a span naming its lane keeps it; the thread's lane ends with its TraceLane.
  std::thread comm([] {
    {
      const gpt::TraceLane lane(1);
      { Span op("lane_of_op_on_comm_thread"); }
      { Span explicit_lane("lane_named_explicitly", "comm", 2); }
    }
    Span after("lane_after_the_scope");
  });
  comm.join();
  trace.write();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  CHECK(lane_of(json, "lane_of_main_thread") == 0);
  CHECK(lane_of(json, "lane_of_op_on_comm_thread") == 1);
  CHECK(lane_of(json, "lane_named_explicitly") == 2);
  CHECK(lane_of(json, "lane_after_the_scope") == 0);
}

// A regular file is replaced only once the new trace is whole: a write that fails (here
// the temporary file beside it cannot be made, as on a full disk) leaves the earlier
// trace as it was, and says so.
TEST_CASE("trace: a failed write keeps the earlier trace", "[trace]") {
  namespace fs = std::filesystem;
  const std::string path = std::string(GPT_TEST_SCRATCH_DIR) + "/trace_kept.json";
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());  // this process's
  fs::remove_all(temporary);
  Trace& trace = Trace::global();
  trace.enable(path, 0);
  { Span first("span_of_the_first_write"); }
  trace.write();
  const auto read = [&] {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const std::string earlier = read();
  REQUIRE(earlier.find("span_of_the_first_write") != std::string::npos);
  fs::create_directory(temporary);  // where the new trace would be written first
  { Span second("span_of_the_failed_write"); }
  REQUIRE_THROWS_WITH(trace.write(), Catch::Contains("trace_file: cannot write") &&
                                         Catch::Contains("the earlier file, if any, is unchanged"));
  CHECK(read() == earlier);
  fs::remove(temporary);
  trace.write();  // the control: with the way clear the new trace replaces it
  CHECK(read().find("span_of_the_failed_write") != std::string::npos);
}

// Times are kept in nanoseconds and written in microseconds to the nanosecond: a span that
// starts in the microsecond its holder ends (the last update inside an optimizer span)
// must still read as inside it. In whole microseconds both would say 9265.
TEST_CASE("trace: spans are written to the nanosecond", "[trace]") {
  const std::string path = std::string(GPT_TEST_SCRATCH_DIR) + "/trace_ns.json";
  Trace& trace = Trace::global();
  trace.enable(path, 0);
  trace.record("holder", "compute", 9219000, 46900);  // 9219.000 .. 9265.900 us
  trace.record("inside", "op", 9265418, 300);         // 9265.418 .. 9265.718 us
  trace.write();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  CHECK(json.find("\"name\":\"holder\",\"cat\":\"compute\",\"ph\":\"X\",\"ts\":9219.000,\"dur\":46.900,") !=
        std::string::npos);
  CHECK(json.find("\"name\":\"inside\",\"cat\":\"op\",\"ph\":\"X\",\"ts\":9265.418,\"dur\":0.300,") !=
        std::string::npos);
}

// A job on fewer ranks than the last one in the same place: the earlier job's rank traces
// go before this one writes its own, so no reader takes an old rank for one of this job's.
// Files that are not traces, or not of this trace_file's name, are the user's and stay.
TEST_CASE("trace: remove_rank_traces removes an earlier job's rank traces alone", "[trace]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(GPT_TEST_SCRATCH_DIR) / "rank_traces";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
  const std::string trace_text = "{\"traceEvents\":[\n]}\n";
  write("t.json.rank0.json", trace_text);
  write("t.json.rank13.json", trace_text);
  write("t.json.rank2.json", "my notes\n");          // not a trace
  write("t.json.rankX.json", trace_text);            // not a rank's name
  write("other.json.rank1.json", trace_text);        // another trace_file's
  write("t.json.rank1.json.old", trace_text);        // not a rank's name
  fs::create_symlink(dir / "other.json.rank1.json", dir / "t.json.rank3.json");  // a link: left alone
  Trace::remove_rank_traces((dir / "t.json").string());
  std::set<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir)) left.insert(entry.path().filename().string());
  CHECK(left == std::set<std::string>{"t.json.rank2.json", "t.json.rankX.json", "other.json.rank1.json",
                                      "t.json.rank1.json.old", "t.json.rank3.json"});
  Trace::remove_rank_traces("");  // no trace_file: nothing to do
  fs::remove_all(dir);
}
