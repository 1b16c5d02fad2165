// Benchmark harness bookkeeping: prompt sets, aggregation math and the report
// writers, on hand-made statistics (no models involved).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "bench/prompt_sets.h"
#include "bench/report.h"
#include "core/error.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::TempDir;

GenerationStats make_stats(int n_gen, double t_gen_ms, int64_t verify_steps, int64_t drafted = 0,
                           int64_t accepted = 0) {
  GenerationStats s;
  s.n_prompt = 10;
  s.t_prompt_ms = 5;
  s.n_gen = n_gen;
  s.t_gen_ms = t_gen_ms;
  s.verify_steps = verify_steps;
  s.target_forwards = verify_steps;
  s.drafted = drafted;
  s.accepted = accepted;
  return s;
}

BenchRun make_run(const std::string& strategy, const std::string& set, GenerationStats stats) {
  BenchRun run;
  run.strategy = strategy;
  run.prompt_set = set;
  run.stats = std::move(stats);
  return run;
}

const BenchResult& find_result(const std::vector<BenchResult>& results, const std::string& strategy,
                               const std::string& set) {
  for (const BenchResult& r : results)
    if (r.strategy == strategy && r.prompt_set == set) return r;
  ADD_FAILURE() << "no result for " << strategy << " on " << set;
  static const BenchResult none;
  return none;
}

// Two sets; ar at 100 tok/s on both, sd at 200 tok/s on code and 125 on prose.
std::vector<BenchRun> sample_runs() {
  std::vector<BenchRun> runs;
  runs.push_back(make_run("ar", "code", make_stats(100, 1000, 100)));
  runs.push_back(make_run("ar", "code", make_stats(100, 1000, 100)));
  runs.push_back(make_run("ar", "prose", make_stats(50, 500, 50)));
  GenerationStats sd = make_stats(100, 500, 40, 80, 60);
  sd.draft_forwards = 80;
  sd.t_draft_ms = 100;
  sd.t_verify_ms = 300;
  sd.per_position.proposed = {40, 40};
  sd.per_position.accepted = {35, 25};
  runs.push_back(make_run("sd", "code", sd));
  runs.push_back(make_run("sd", "code", sd));
  GenerationStats sd_prose = make_stats(50, 400, 25, 50, 25);
  sd_prose.t_draft_ms = 50;
  sd_prose.per_position.proposed = {25, 20, 5};
  sd_prose.per_position.accepted = {20, 5, 0};
  runs.push_back(make_run("sd", "prose", sd_prose));
  return runs;
}

const std::vector<std::string> kStrategies = {"ar", "sd"};
const std::vector<std::string> kSets = {"code", "prose"};

TEST(BenchReport, AggregatesSumsThenRatios) {
  const auto results = aggregate_runs(sample_runs(), kStrategies, kSets);
  const BenchResult& ar = find_result(results, "ar", "code");
  EXPECT_EQ(ar.runs, 2);
  EXPECT_EQ(ar.total.n_gen, 200);
  EXPECT_DOUBLE_EQ(ar.tok_per_s(), 100.0);
  EXPECT_DOUBLE_EQ(ar.speedup, 1.0);
  EXPECT_DOUBLE_EQ(ar.tau(), 1.0);
  EXPECT_EQ(ar.total.drafted, 0);
  EXPECT_DOUBLE_EQ(ar.alpha(), 0.0);

  const BenchResult& sd = find_result(results, "sd", "code");
  EXPECT_EQ(sd.runs, 2);
  EXPECT_DOUBLE_EQ(sd.tok_per_s(), 200.0);
  EXPECT_DOUBLE_EQ(sd.speedup, 2.0);
  EXPECT_DOUBLE_EQ(sd.tau(), 200.0 / 80.0);  // generated tokens per verification step
  EXPECT_DOUBLE_EQ(sd.alpha(), 0.75);        // 120 accepted of 160 drafted
  EXPECT_DOUBLE_EQ(sd.t_draft_ms(), 200.0 / 80.0);
  EXPECT_DOUBLE_EQ(sd.t_verify_ms(), 600.0 / 80.0);
  EXPECT_DOUBLE_EQ(sd.total.t_draft_ms, 200.0);
  EXPECT_EQ(sd.total.draft_forwards, 160);
  EXPECT_EQ(sd.total.target_forwards, 80);
  const std::vector<double> positions = sd.position_acceptance();
  ASSERT_EQ(positions.size(), 2u);
  EXPECT_DOUBLE_EQ(positions[0], 70.0 / 80.0);
  EXPECT_DOUBLE_EQ(positions[1], 50.0 / 80.0);

  const BenchResult& sd_prose = find_result(results, "sd", "prose");
  EXPECT_DOUBLE_EQ(sd_prose.speedup, 125.0 / 100.0);
  EXPECT_DOUBLE_EQ(sd_prose.alpha(), 0.5);
}

TEST(BenchReport, AllRowUsesTotalsOverEverySet) {
  const auto results = aggregate_runs(sample_runs(), kStrategies, kSets);
  // Order: each set's strategies, then the "all" rows.
  ASSERT_EQ(results.size(), 6u);
  EXPECT_EQ(results[0].prompt_set, "code");
  EXPECT_EQ(results[0].strategy, "ar");
  EXPECT_EQ(results[1].strategy, "sd");
  EXPECT_EQ(results[2].prompt_set, "prose");
  EXPECT_EQ(results[4].prompt_set, kAllSets);
  EXPECT_EQ(results[5].prompt_set, kAllSets);

  const BenchResult& ar = find_result(results, "ar", "all");
  const BenchResult& sd = find_result(results, "sd", "all");
  EXPECT_EQ(ar.total.n_gen, 250);
  EXPECT_DOUBLE_EQ(ar.tok_per_s(), 100.0);
  EXPECT_EQ(sd.total.n_gen, 250);
  EXPECT_DOUBLE_EQ(sd.tok_per_s(), 250.0 / 1.4);
  EXPECT_DOUBLE_EQ(sd.speedup, (250.0 / 1.4) / 100.0);
  EXPECT_DOUBLE_EQ(sd.tau(), 250.0 / 105.0);
  EXPECT_DOUBLE_EQ(sd.alpha(), 145.0 / 210.0);
  // Positions summed with the longer list extended.
  ASSERT_EQ(sd.total.per_position.proposed, (std::vector<int64_t>{105, 100, 5}));
  ASSERT_EQ(sd.total.per_position.accepted, (std::vector<int64_t>{90, 55, 0}));
}

TEST(BenchReport, SingleSetHasNoAllRowAndMissingArGivesNoSpeedup) {
  std::vector<BenchRun> runs = {make_run("sd", "code", make_stats(10, 100, 5, 10, 5))};
  const std::vector<std::string> one_set = {"code"};
  const auto results = aggregate_runs(runs, kStrategies, one_set);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].strategy, "sd");
  EXPECT_EQ(results[0].speedup, 0.0);

  BenchReport report;
  report.results = results;
  const auto json = report_json(report);
  EXPECT_TRUE(json["results"][0]["speedup"].is_null());
  EXPECT_DOUBLE_EQ(json["results"][0]["alpha"].get<double>(), 0.5);
}

TEST(BenchReport, CountsMismatchesOfCheckedRuns) {
  std::vector<BenchRun> runs = sample_runs();
  for (BenchRun& run : runs) run.checked = true;
  runs[4].matches_ar = false;
  const auto results = aggregate_runs(runs, kStrategies, kSets);
  EXPECT_EQ(find_result(results, "sd", "code").checked, 2);
  EXPECT_EQ(find_result(results, "sd", "code").mismatches, 1);
  EXPECT_EQ(find_result(results, "sd", "prose").mismatches, 0);
  EXPECT_EQ(find_result(results, "sd", "all").mismatches, 1);
  EXPECT_EQ(find_result(results, "ar", "all").mismatches, 0);
}

TEST(BenchReport, FirstDifference) {
  const std::vector<int32_t> a = {1, 2, 3}, b = {1, 2, 4}, c = {1, 2}, d = {1, 2, 3};
  EXPECT_FALSE(first_difference(a, d).has_value());
  EXPECT_EQ(first_difference(a, b), 2u);
  EXPECT_EQ(first_difference(a, c), 2u);
  EXPECT_EQ(first_difference(c, a), 2u);
  EXPECT_EQ(first_difference(std::vector<int32_t>{}, a), 0u);
}

BenchReport sample_report(bool checked) {
  BenchReport report;
  report.machine.cpu_model = "Test CPU";
  report.machine.cores = 2;
  report.machine.threads = 2;
  report.machine.threads_draft = 1;
  report.machine.memory_bytes = int64_t{8} << 30;
  report.config = {{"n", 64}, {"temp", 0.0}};
  std::vector<BenchRun> runs = sample_runs();
  for (BenchRun& run : runs) run.checked = checked;
  if (checked) runs[4].matches_ar = false;
  report.results = aggregate_runs(runs, kStrategies, kSets);
  report.exactness_checked = checked;
  if (checked) report.mismatches.push_back({"sd", "code", 3, 0, 17});
  return report;
}

TEST(BenchReport, JsonHasTheIssueShapeAndConventionNames) {
  const auto json = report_json(sample_report(true));
  std::vector<std::string> top;
  for (auto it = json.begin(); it != json.end(); ++it) top.push_back(it.key());
  ASSERT_GE(top.size(), 3u);
  EXPECT_EQ(top[0], "machine");
  EXPECT_EQ(top[1], "config");
  EXPECT_EQ(top[2], "results");

  EXPECT_EQ(json["machine"]["cpu_model"], "Test CPU");
  EXPECT_EQ(json["machine"]["cores"], 2);
  EXPECT_EQ(json["machine"]["threads"], 2);
  EXPECT_EQ(json["machine"]["threads_draft"], 1);
  EXPECT_DOUBLE_EQ(json["machine"]["memory_gib"].get<double>(), 8.0);
  EXPECT_EQ(json["config"]["n"], 64);

  ASSERT_EQ(json["results"].size(), 6u);
  for (const auto& r : json["results"]) {
    for (const char* key : {"strategy", "prompt_set", "tok_per_s", "speedup", "tau", "alpha",
                            "t_draft_ms", "t_verify_ms", "n_gen", "drafted", "accepted",
                            "verify_steps", "target_forwards", "draft_forwards", "t_draft_ms_total",
                            "t_verify_ms_total", "per_position_acceptance", "mismatch"})
      EXPECT_TRUE(r.contains(key)) << key;
  }
  const auto& sd = json["results"][1];
  EXPECT_EQ(sd["strategy"], "sd");
  EXPECT_EQ(sd["prompt_set"], "code");
  EXPECT_DOUBLE_EQ(sd["speedup"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(sd["tau"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(sd["alpha"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(sd["t_draft_ms"].get<double>(), 2.5);
  EXPECT_EQ(sd["n_gen"], 200);
  EXPECT_EQ(sd["mismatch"], 1);
  EXPECT_EQ(sd["per_position_acceptance"].size(), 2u);
  EXPECT_DOUBLE_EQ(sd["per_position_acceptance"][0].get<double>(), 0.875);
  EXPECT_TRUE(json["results"][0]["alpha"].is_null());  // ar drafts nothing
  ASSERT_EQ(json["mismatches"].size(), 1u);
  EXPECT_EQ(json["mismatches"][0]["position"], 17);
  EXPECT_EQ(json["mismatches"][0]["prompt_index"], 3);

  // Round trip through text: it is valid JSON.
  EXPECT_EQ(nlohmann::json::parse(json.dump())["results"][1]["strategy"], "sd");
}

TEST(BenchReport, JsonMismatchIsNullWhenNotChecked) {
  const auto json = report_json(sample_report(false));
  EXPECT_FALSE(json["exactness_checked"].get<bool>());
  for (const auto& r : json["results"]) EXPECT_TRUE(r["mismatch"].is_null());
}

size_t count_unescaped_pipes(const std::string& line) {
  size_t n = 0;
  for (size_t i = 0; i < line.size(); ++i)
    if (line[i] == '|' && (i == 0 || line[i - 1] != '\\')) ++n;
  return n;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(BenchReport, MarkdownTableHasOneRowPerResultAndConsistentColumns) {
  BenchReport report = sample_report(true);
  report.results[0].prompt_set = "a|b";  // must be escaped, not split a cell
  const std::vector<std::string> lines = split_lines(report_markdown(report));
  ASSERT_EQ(lines.size(), 2 + report.results.size());
  const size_t pipes = count_unescaped_pipes(lines[0]);
  EXPECT_EQ(pipes, 14u);  // 13 columns
  for (const std::string& line : lines) {
    EXPECT_EQ(line.front(), '|');
    EXPECT_EQ(line.back(), '|');
    EXPECT_EQ(count_unescaped_pipes(line), pipes) << line;
  }
  EXPECT_TRUE(std::regex_match(lines[1], std::regex(R"((\|-+:?)+\|)")));
  EXPECT_NE(lines[3].find("| sd | code | 200.00 | 2.00x | 2.50 | 0.750 |"), std::string::npos)
      << lines[3];
  EXPECT_NE(lines[3].find("0.88 / 0.62"), std::string::npos);
  EXPECT_NE(lines[3].find("NO (1/2)"), std::string::npos);
  EXPECT_NE(lines[2].find("a\\|b"), std::string::npos);
}

TEST(BenchReport, TerminalTableListsEveryResult) {
  const std::string table = report_table(sample_report(true));
  const std::vector<std::string> lines = split_lines(table);
  ASSERT_GE(lines.size(), 8u);
  EXPECT_EQ(lines[0].rfind("strategy", 0), 0u);
  EXPECT_TRUE(
      std::regex_search(lines[3], std::regex(R"(^sd\s+code\s+200\.00\s+2\.00x\s+2\.500\s+0\.750)")))
      << lines[3];
  EXPECT_NE(table.find("acceptance by draft position"), std::string::npos);
  EXPECT_NE(table.find("sd: 0.86 0.55 0.00"), std::string::npos) << table;
}

// A mixture-of-experts target: the experts each strategy's target forwards
// touched per layer, in the table, the Markdown and the JSON; dense rows have none.
TEST(BenchReport, ReportsTheExpertsAMixtureOfExpertsTargetTouched) {
  std::vector<BenchRun> runs = sample_runs();
  for (BenchRun& run : runs) {
    const bool speculative = run.strategy != "ar";
    run.stats.expert_layer_passes = 10;
    run.stats.experts_touched = speculative ? 35 : 20;
  }
  BenchReport report = sample_report(false);
  report.results = aggregate_runs(runs, kStrategies, kSets);
  const std::string table = report_table(report);
  EXPECT_NE(table.find("distinct experts per layer a target forward touched"), std::string::npos);
  EXPECT_NE(table.find("  sd (code): 3.50"), std::string::npos) << table;
  EXPECT_NE(table.find("  ar (code): 2.00"), std::string::npos) << table;
  EXPECT_NE(report_markdown(report).find("sd (code): 3.50"), std::string::npos);
  EXPECT_DOUBLE_EQ(report_json(report)["results"][1]["experts_per_forward"].get<double>(), 3.5);

  const BenchReport dense = sample_report(false);
  EXPECT_EQ(report_table(dense).find("distinct experts"), std::string::npos);
  EXPECT_TRUE(report_json(dense)["results"][1]["experts_per_forward"].is_null());
}

// Minimal XML well-formedness: every element closed in order, attributes
// quoted, no stray '&' or '<' in text.
void expect_well_formed_xml(const std::string& xml) {
  std::vector<std::string> stack;
  size_t i = 0;
  bool seen_root = false;
  while (i < xml.size()) {
    if (xml[i] == '<') {
      const size_t close = xml.find('>', i);
      ASSERT_NE(close, std::string::npos) << "unterminated tag at " << i;
      std::string tag = xml.substr(i + 1, close - i - 1);
      ASSERT_EQ(tag.find('<'), std::string::npos) << "'<' inside tag at " << i;
      i = close + 1;
      if (tag.front() == '?') {
        ASSERT_EQ(tag.back(), '?');
        continue;
      }
      if (tag.front() == '/') {
        ASSERT_FALSE(stack.empty()) << "closing " << tag << " without opening";
        ASSERT_EQ(stack.back(), tag.substr(1));
        stack.pop_back();
        continue;
      }
      const bool self_closing = tag.back() == '/';
      if (self_closing) tag.pop_back();
      const std::string name = tag.substr(0, tag.find_first_of(" \n\t"));
      ASSERT_TRUE(std::regex_match(name, std::regex("[A-Za-z][A-Za-z0-9-]*"))) << name;
      const std::string attributes = tag.substr(name.size());
      ASSERT_TRUE(
          std::regex_match(attributes, std::regex(R"((\s+[A-Za-z][A-Za-z0-9:-]*="[^"<]*")*\s*)")))
          << "bad attributes in <" << tag << ">";
      if (stack.empty()) {
        ASSERT_FALSE(seen_root) << "second root element";
        seen_root = true;
      }
      if (!self_closing) stack.push_back(name);
    } else {
      if (xml[i] == '&') {
        const size_t semi = xml.find(';', i);
        ASSERT_NE(semi, std::string::npos);
        const std::string entity = xml.substr(i, semi - i + 1);
        ASSERT_TRUE(entity == "&amp;" || entity == "&lt;" || entity == "&gt;" ||
                    entity == "&quot;" || entity == "&apos;")
            << entity;
      }
      ASSERT_TRUE(!stack.empty() || std::isspace(static_cast<unsigned char>(xml[i])))
          << "text outside the root element at " << i;
      ++i;
    }
  }
  EXPECT_TRUE(seen_root);
  EXPECT_TRUE(stack.empty()) << "unclosed <" << stack.back() << ">";
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(BenchReport, SvgIsWellFormedWithOneBarPerStrategyAndSet) {
  BenchReport report = sample_report(true);
  const std::string svg = report_svg(report);
  expect_well_formed_xml(svg);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  // 2 strategies × (code, prose, all).
  EXPECT_EQ(count_of(svg, "class=\"bar\""), 6u);
  EXPECT_EQ(count_of(svg, "class=\"legend-swatch\""), 2u);
  EXPECT_EQ(count_of(svg, "data-strategy=\"sd\" data-prompt-set=\"prose\""), 1u);
  EXPECT_NE(svg.find(">prompt set</text>"), std::string::npos);
  EXPECT_NE(svg.find("speedup over ar"), std::string::npos);

  // The tallest bar (sd on code, 2.0x) is taller than ar's (1.0x).
  const std::regex bar(
      R"re(data-strategy="(\w+)" data-prompt-set="code" [^>]*height="([0-9.]+)")re");
  std::map<std::string, double> heights;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), bar); it != std::sregex_iterator();
       ++it)
    heights[(*it)[1]] = std::stod((*it)[2]);
  ASSERT_EQ(heights.size(), 2u);
  EXPECT_NEAR(heights["sd"], 2 * heights["ar"], 0.2);

  // Names from user files are escaped.
  for (BenchResult& r : report.results)
    if (r.prompt_set == "prose") r.prompt_set = "q&a <2>";
  const std::string escaped = report_svg(report);
  expect_well_formed_xml(escaped);
  EXPECT_NE(escaped.find("q&amp;a &lt;2&gt;"), std::string::npos);
}

TEST(BenchReport, SvgWithManyStrategiesKeepsOneBarEach) {
  std::vector<BenchRun> runs;
  const std::vector<std::string> strategies = {"ar", "sd", "tree", "dyntree", "pearl"};
  const std::vector<std::string> sets = {"code", "math", "prose", "chat"};
  for (const auto& s : strategies)
    for (const auto& set : sets) runs.push_back(make_run(s, set, make_stats(10, 10 + s.size(), 5)));
  BenchReport report;
  report.results = aggregate_runs(runs, strategies, sets);
  const std::string svg = report_svg(report);
  expect_well_formed_xml(svg);
  EXPECT_EQ(count_of(svg, "class=\"bar\""), strategies.size() * (sets.size() + 1));
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(BenchReport, LoadsPromptSetsByNameOrPath) {
  TempDir dir;
  write_file(dir.file("chat.jsonl"),
             "{\"prompt\": \"Hello?\"}\n\n{\"prompt\": \"Why \\\"quotes\\\"?\", \"id\": 2}\r\n");
  write_file(dir.file("mine.jsonl"), "{\"prompt\": \"def f(x):\"}");
  const PromptSet chat = load_prompt_set("chat", dir.file(""));
  EXPECT_EQ(chat.name, "chat");
  EXPECT_TRUE(chat.chat);
  ASSERT_EQ(chat.prompts.size(), 2u);
  EXPECT_EQ(chat.prompts[1], "Why \"quotes\"?");
  const PromptSet mine = load_prompt_set(dir.file("mine.jsonl"), "/nonexistent");
  EXPECT_EQ(mine.name, "mine");
  EXPECT_FALSE(mine.chat);
  EXPECT_EQ(mine.prompts, std::vector<std::string>{"def f(x):"});
}

TEST(BenchReport, PromptSetErrorsNameTheFileAndLine) {
  TempDir dir;
  write_file(dir.file("code.jsonl"), "{\"prompt\": \"a\"}\n");
  const std::string unknown = error_of([&] { load_prompt_set("poetry", dir.file("")); });
  EXPECT_NE(unknown.find("unknown prompt set 'poetry'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("poetry.jsonl"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("known sets: code"), std::string::npos) << unknown;

  const std::string missing = error_of([&] { load_prompt_set(dir.file("nope.jsonl"), ""); });
  EXPECT_NE(missing.find("cannot open prompt file"), std::string::npos) << missing;
  EXPECT_NE(missing.find("nope.jsonl"), std::string::npos) << missing;

  write_file(dir.file("bad.jsonl"), "{\"prompt\": \"ok\"}\n\n{\"prompt\": \"unterminated}\n");
  const std::string bad = error_of([&] { load_prompt_set(dir.file("bad.jsonl"), ""); });
  EXPECT_NE(bad.find(dir.file("bad.jsonl") + ":3: not a valid JSON line"), std::string::npos)
      << bad;

  const auto parse_error = [](const std::string& text) {
    return error_of([&] { parse_prompt_lines(text, "f.jsonl"); });
  };
  EXPECT_NE(parse_error("[1, 2]").find("f.jsonl:1: expected a JSON object"), std::string::npos);
  EXPECT_NE(parse_error("{\"prompt\": \"x\"}\n{\"text\": \"x\"}")
                .find("f.jsonl:2: the object has "
                      "no \"prompt\" key"),
            std::string::npos);
  EXPECT_NE(parse_error("{\"prompt\": 3}").find("f.jsonl:1: \"prompt\" must be a string"),
            std::string::npos);
  EXPECT_NE(parse_error("{\"prompt\": \"\"}").find("f.jsonl:1: \"prompt\" is empty"),
            std::string::npos);
  EXPECT_NE(parse_error("\n  \n").find("f.jsonl: no prompts"), std::string::npos);
}

TEST(BenchReport, BundledPromptSetsHaveAtLeastTwentyDistinctPrompts) {
  const std::string dir = std::string(PARSPEC_SOURCE_DIR) + "/bench/prompts";
  for (const char* name : {"code", "math", "prose", "chat"}) {
    const PromptSet set = load_prompt_set(name, dir);
    EXPECT_GE(set.prompts.size(), 20u) << name;
    std::vector<std::string> sorted = set.prompts;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << name;
    EXPECT_EQ(set.chat, std::string(name) == "chat");
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The command on two tiny random models: the draft is the target itself, so
// every draft token is accepted and every output must equal ar's (the tree's
// shape given: chosen as it ran, a drafter as dear as the target takes plain
// steps).
TEST(BenchReport, CommandWritesEveryReport) {
  TempDir dir;
  RandomModelSpec spec;
  const std::string model = testing_support::write_model(dir, "m.gguf", spec);
  write_file(dir.file("p.jsonl"), "{\"prompt\": \"def f(x):\"}\n{\"prompt\": \"Q: 2 + 3?\"}\n");
  const std::string command = std::string(PARSPEC_BINARY) + " bench -m " + model + " -md " + model +
                              " --strategies sd,ar,tree:d2c2 -n 6 -t 1 --warmup 2 --prompts " +
                              dir.file("p.jsonl") + ",code --max-prompts 2 --json " +
                              dir.file("r.json") + " --md " + dir.file("r.md") + " --svg " +
                              dir.file("r.svg") + " > " + dir.file("stdout.txt") + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << read_file(dir.file("stdout.txt"));

  const auto json = nlohmann::json::parse(read_file(dir.file("r.json")));
  EXPECT_EQ(json["config"]["n"], 6);
  EXPECT_EQ(json["config"]["strategies"], (std::vector<std::string>{"sd", "ar", "tree:d2c2"}));
  EXPECT_TRUE(json["exactness_checked"].get<bool>());
  EXPECT_TRUE(json["mismatches"].empty());
  // 3 strategies × (p, code, all).
  ASSERT_EQ(json["results"].size(), 9u);
  for (const auto& r : json["results"]) {
    EXPECT_EQ(r["n_gen"], r["prompt_set"] == "all" ? 24 : 12) << r.dump();
    EXPECT_GT(r["tok_per_s"].get<double>(), 0.0);
    // Every strategy but ar is compared with ar, wherever ar sits in the list.
    EXPECT_EQ(r["checked_runs"], r["strategy"] == "ar" ? 0 : r["runs"].get<int>()) << r.dump();
    if (r["strategy"] == "ar") continue;
    EXPECT_EQ(r["mismatch"], 0);
    // The draft is the target: the chain is always accepted whole, and so is
    // the tree's best path (its other nodes count as drafted, not accepted).
    if (r["strategy"] == "sd") {
      EXPECT_DOUBLE_EQ(r["alpha"].get<double>(), 1.0);
    }
    ASSERT_FALSE(r["per_position_acceptance"].empty());
    for (const auto& rate : r["per_position_acceptance"]) EXPECT_DOUBLE_EQ(rate.get<double>(), 1.0);
    EXPECT_GT(r["tau"].get<double>(), 1.0);
    EXPECT_GT(r["draft_forwards"].get<int>(), 0);
  }
  EXPECT_NE(read_file(dir.file("stdout.txt")).find("prompt set"), std::string::npos);
  EXPECT_NE(read_file(dir.file("r.md")).find("| sd | code |"), std::string::npos);
  const std::string svg = read_file(dir.file("r.svg"));
  expect_well_formed_xml(svg);
  EXPECT_EQ(count_of(svg, "class=\"bar\""), 9u);
}

TEST(BenchReport, ParsesMachineInfo) {
  const std::string cpuinfo =
      "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n"
      "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
  EXPECT_EQ(parse_cpu_model(cpuinfo), "Intel(R) Xeon(R) CPU @ 2.20GHz");
  EXPECT_EQ(parse_cpu_model("processor : 0\n"), "");
  EXPECT_EQ(parse_mem_total("MemTotal:        8052936 kB\nMemFree: 1 kB\n"), 8052936LL * 1024);
  EXPECT_EQ(parse_mem_total("MemFree: 1 kB\n"), 0);
  const MachineInfo here = read_machine_info();
  EXPECT_GE(here.cores, 1);
  EXPECT_GT(here.memory_bytes, 0);
}

}  // namespace
}  // namespace parspec
