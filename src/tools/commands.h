#pragma once
// Subcommands of the parspec CLI. Each takes the full argv (argv[1] is the
// subcommand name) and returns the process exit code; errors are thrown as
// parspec::Error and printed by main().
namespace parspec {

int cmd_generate(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_bench_forward(int argc, char** argv);
int cmd_make_model(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_tune(int argc, char** argv);
int cmd_lp_similarity(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_simulate(int argc, char** argv);

}  // namespace parspec
