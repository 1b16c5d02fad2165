// parspec quantize IN.gguf OUT.gguf TYPE: rewrites a model's weight matrices
// in another tensor type (as llama.cpp's llama-quantize does), keeping
// metadata, norms, biases and other 1-D tensors as they are.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "kernels/quant.h"
#include "model/gguf.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace parspec {

int cmd_quantize(int argc, char** argv) {
  std::vector<std::string> positional;
  ArgParser args("quantize",
                 "Rewrite the 2-D weight tensors of a GGUF model in another type (f32, f16, bf16,\n"
                 "q8_0, q4_0, q4_k, q6_k). 1-D tensors (norms, biases, rope factors) are kept.\n"
                 "A matrix whose rows do not fit the type's block size is kept as it is.");
  args.positional("IN.gguf OUT.gguf TYPE", &positional, 3, "input model, output path, target type");
  if (!args.parse(argc, argv)) return 0;
  check(positional.size() == 3, "usage: parspec quantize IN.gguf OUT.gguf TYPE");
  const DType type = parse_dtype(positional[2]);
  {
    // The same file under another name (./in.gguf, a link) is still the input.
    std::error_code ec;
    check(!std::filesystem::equivalent(positional[0], positional[1], ec), "the output ",
          positional[1], " is the input file ", positional[0], ": it must not overwrite it");
  }

  auto in = GgufFile::open(positional[0]);
  GgufWriter out;
  for (const auto& [key, value] : in->metadata())
    if (key != "general.file_type") out.set(key, value);
  const bool tty = isatty(fileno(stderr));
  size_t converted = 0, kept = 0;
  std::vector<float> row;
  std::vector<uint8_t> data;
  for (const auto& t : in->tensors()) {
    const uint8_t* src = in->tensor_data(t);
    // Matrices and stacks of expert matrices; a router (ffn_gate_inp) stays as
    // it is, as llama.cpp's quantizer keeps it: its choice is too sensitive.
    const bool matrix =
        (t.dims.size() == 2 || t.dims.size() == 3) && !t.name.ends_with(".ffn_gate_inp.weight");
    const bool fits = matrix && t.dims[0] % type_info(type).block_elems == 0;
    if (!fits || t.type == type) {
      out.add_tensor(t.name, t.dims, t.type, src, t.n_bytes);
      ++kept;
      continue;
    }
    const int64_t n_in = t.dims[0];
    const int64_t n_rows = t.dims[1] * (t.dims.size() == 3 ? t.dims[2] : 1);
    const size_t in_row = row_bytes(t.type, n_in), out_row = row_bytes(type, n_in);
    row.resize(n_in);
    data.resize(out_row * n_rows);
    for (int64_t r = 0; r < n_rows; ++r) {
      dequantize_row(t.type, src + in_row * r, row.data(), n_in);
      quantize_row(type, row.data(), data.data() + out_row * r, n_in);
    }
    out.add_tensor(t.name, t.dims, type, data.data(), data.size());
    ++converted;
    if (tty) std::fprintf(stderr, "\rquantize: %zu tensors converted", converted);
  }
  if (tty) std::fprintf(stderr, "\n");
  out.write(positional[1]);
  std::fprintf(stderr, "quantize: wrote %s (%zu tensors as %s, %zu kept)\n", positional[1].c_str(),
               converted, std::string(type_info(type).name).c_str(), kept);
  return 0;
}

}  // namespace parspec
