#!/usr/bin/env python3
"""Copies kernels of src/cuda/kernels.cu into a C++ header that the host compiler
builds against cuda_on_cpu.h: the kernels' own text, with the CUDA keywords the
CPU does not know taken out. Usage: extract_kernels.py KERNELS_CU OUTPUT_H"""
import re
import sys

source = open(sys.argv[1]).read()


def piece(start, end="\n}\n"):
    """From the line that starts with `start` to the first `end` after it."""
    at = source.find(start)
    if at < 0:
        shown = start.replace("\n", " ")
        sys.exit(f"extract_kernels.py: '{shown}' is no longer in {sys.argv[1]}: "
                 "update tests/cuda_emulation/extract_kernels.py")
    return source[at:source.index(end, at) + len(end)]


pieces = [
    piece("__constant__ bool weights_early_wanted;", "\n"),
    piece("__constant__ bool operands_early_wanted;", "\n"),
    piece("__device__ void prefetch_range_l2("),
    piece("__device__ __forceinline__ void prefetch_weight_row("),
    piece("template <class RowOf>\n__device__ void prefetch_rows_early("),
    piece("__device__ float warp_sum(float v) {"),
    piece("__device__ float warp_max(float v) {"),
    piece("__device__ int64_t q8_block_index("),
    piece("__device__ void quantize_block(float v, int lane, int8_t* q, float* scale) {"),
    piece("__device__ __forceinline__ int q8k_quant("),
    piece("__device__ __forceinline__ float q8k_scale("),
    piece("__device__ __forceinline__ void store_q8k_value("),
    piece("__device__ __forceinline__ float super_block_amax("),
    piece("__global__ void quantize_q8k_kernel("),
    piece("struct RawBlock {", "\n};\n"),
    piece("template <WeightKind kKind>\n__device__ RawBlock load_raw_block("),
    piece("template <WeightKind kKind>\n__device__ void unpack_raw_block("),
    piece("template <WeightKind kKind>\n__device__ void load_block_q("),
    piece("__device__ int block_dot_s8("),
    piece("template <WeightKind kKind>\nconstexpr int kMmaSumMagicBits", ";\n"),
    piece("__device__ __forceinline__ float biased_sum_to_float("),
    piece("__device__ __forceinline__ float block_dot_float("),
    piece("__device__ __forceinline__ float swiglu_value("),
    piece("__global__ void swiglu_kernel("),
    piece("__device__ bool tile_of_part("),
    piece("__device__ bool block_tile_of_part("),
    piece("__device__ bool block_tile("),
    piece("__device__ float half_warp_sum_in_order("),
    piece("__device__ void stage_activation_row("),
    piece("template <bool kFromL2 = false>\n__device__ float normalized_row_scale("),
    piece("__device__ float4 normalized4("),
    piece("__device__ void stage_normalized_row("),
    piece("__device__ void stage_input_row("),
    piece("__global__ void __launch_bounds__(kNormBlock)\n    add_rmsnorm_wide_kernel("),
    piece("__device__ bool last_block_to_arrive("),
    piece("__device__ void normalize_after_last_block("),
    piece("template <WeightKind kKind, int kCount = kGemvPrefetch>\nstruct FirstBlocks {", "\n};\n"),
    piece("template <WeightKind kKind, int kUnroll, int kFirst = kGemvPrefetch, class Step>\n"
          "__device__ void each_later_block("),
    piece("__device__ int64_t kv_row(const AttentionRow& r, int layer, int32_t slot, int kv_dim) {"),
    piece("struct QkvStore {", "\n};\n"),
    piece("__device__ int64_t qkv_tile_row("),
    piece("__device__ void store_qkv_tile("),
    piece("template <WeightKind kKind, bool kQkv = false>\n__global__ void __launch_bounds__(kGemvThreads)\n"
          "    matmul_gemv_kernel("),
    piece("template <class Partials>\n__device__ __forceinline__ float sum_in_warp_order("),
    piece("template <WeightKind kKind, int kR>\n__global__ void __launch_bounds__(kGemvThreads)\n"
          "    matmul_rows_kernel("),
    piece("template <WeightKind kKind, int kR, int kW>\n"
          "__global__ void __launch_bounds__(kGemvThreads / kW)\n    matmul_rows_wide_kernel("),
    piece("template <WeightKind kKind>\n__global__ void __launch_bounds__(kPairedThreads, 2)\n"
          "    matmul_gemv_paired_kernel("),
    piece("template <WeightKind kKind>\n__global__ void __launch_bounds__(kGatedThreads)\n"
          "    matmul_gemv_gated_kernel("),
    piece("__device__ __forceinline__ int q4_high_nibbles_as_16x("),
    piece("template <WeightKind kKind>\n__device__ __forceinline__ void mma_block_sums("),
    piece("template <WeightKind kKind>\n__device__ __forceinline__ void wide_a_words("),
    piece("template <int kTiles>\n__device__ __forceinline__ void store_warp_accumulators("),
    piece("template <int kTiles>\n__device__ __forceinline__ void add_warp_sums("),
    piece("template <WeightKind kKind, bool kWide>\n__device__ void load_a_fragment("),
    piece("template <WeightKind kKind, int kTiles, bool kBlockMajor, bool kPipelined = false>\n"
          "// One activation tile"),
    piece("template <WeightKind kKind>\n__device__ void split_pair("),
    piece("template <int kTiles>\n__device__ __forceinline__ void add_gated_warp_sums("),
    piece("template <WeightKind kKind>\n__global__ void split_halves_kernel("),
    piece("enum class HalfEpilogue {", "\n"),
    piece("enum class HalfInput {", "\n"),
    piece("template <WeightKind kKind, int kTiles, HalfEpilogue kEpilogue = HalfEpilogue::kPlain,\n"
          "          HalfInput kInput = HalfInput::kRows, bool kEarly = false>\n"
          "__global__ void __launch_bounds__(kMmaWarps* kWarp, kTiles == 1 ? 2 : 1)\n"
          "    matmul_half_mma_kernel("),
    piece("template <int kStages, class Issue, class Compute>\n"
          "__device__ __forceinline__ void each_position_streamed("),
    piece("template <int kW>\nconstexpr int kStreamWarpsFor", ";\n"),
    piece("template <int kW, int kTiles>\nconstexpr int kStreamMinBlocks", ";\n"),
    piece("__host__ __device__ int weight_row_tiles("),
    piece("template <WeightKind kKind, int kTiles, int kW, int kBlocks = 16>\nstruct StreamStage {",
          "\n};\n"),
    piece("enum class StreamParts {", "\n"),
    piece("template <WeightKind kKind, int kTiles, int kW, int kThreads, int kBlocks = 16>\n"
          "__device__ __forceinline__ void issue_stream_round("),
    piece("template <WeightKind kKind, int kTiles, int kW, int kBlocks = 16>\n"
          "__device__ __forceinline__ void stream_step("),
    piece("template <int kChains, int kW, int kTiles>\n"
          "__device__ __forceinline__ void zero_accumulators("),
    piece("template <int kW, int kTiles, int kWeightRows, int R>\n"
          "__device__ __forceinline__ void store_chain_sums("),
    piece("template <WeightKind kKind, int kTiles, int kW, int kMinBlocks = kStreamMinBlocks<kW, kTiles>>\n"
          "__global__ void __launch_bounds__(kStreamWarpsFor<kW>* kWarp, kMinBlocks)\n"
          "    matmul_stream_kernel("),
    piece("template <WeightKind kKind>\n"
          "__global__ void __launch_bounds__(kStreamChains / kSplitGroups * kWarp)\n"
          "    matmul_stream_split_kernel("),
    piece("template <int kW>\nconstexpr int kPersistentBlocks", ";\n"),
    piece("template <int kTiles>\nconstexpr int kPersistentHeldChains", ";\n"),
    piece("template <WeightKind kKind, int kTiles, int kW>\nconstexpr int kPersistentSumBytes", ";\n"),
    piece("constexpr int kPersistentSharedLimit", "\n"),
    piece("template <WeightKind kKind, int kTiles, int kW>\nconstexpr int kPersistentStages",
          "\n}();\n"),
    piece("template <WeightKind kKind, int kTiles, int kW>\nconstexpr int kPersistentBytes", ";\n"),
    piece("template <WeightKind kKind, int kTiles, int kW>\n"
          "__global__ void __launch_bounds__(kStreamWarpsFor<kW>* kWarp, kPersistentBlocks<kW>)\n"
          "    matmul_stream_persistent_kernel("),
    piece("template <WeightKind kKind>\nstruct PrefillStage {", "\n};\n"),
    piece("template <WeightKind kKind>\nconstexpr int kPrefillGroupedBytes", ";\n"),
    piece("template <int kGroups>\n__device__ __forceinline__ int chain_round("),
    piece("template <int kGroups>\n__device__ __forceinline__ int chain_round_steps("),
    piece("__device__ __forceinline__ int chain_major_block("),
    piece("struct PrefillSums {", "\n};\n"),
    piece("template <int kRows, int kCols>\n__device__ bool prefill_tile("),
    piece("struct QuantPrefillTile {", "\n};\n"),
    piece("__device__ __forceinline__ bool quant_prefill_tile("),
    piece("template <WeightKind kKind>\n__device__ __forceinline__ void issue_prefill_block("),
    piece("template <WeightKind kKind>\n__device__ __forceinline__ void add_prefill_block("),
    piece("template <WeightKind kKind>\n__global__ void __launch_bounds__(kPrefillThreads)\n"
          "    matmul_prefill_kernel("),
    piece("template <WeightKind kKind>\n"
          "__global__ void __launch_bounds__(kPrefillGroups* kPrefillThreads, 1)\n"
          "    matmul_prefill_grouped_kernel("),
    piece("__device__ float half_at(const uint8_t* p) {"),
    piece("template <class Byte>\n__device__ __forceinline__ void q4k_scale_min_of("),
    piece("__device__ void q4k_scale_min("),
    piece("__device__ bool warp_row("),
    piece("template <WeightKind kKind>\n__device__ __forceinline__ float k_super_block_value("),
    piece("__device__ __forceinline__ void add_scaled_sums("),
    piece("template <WeightKind kKind>\n__device__ void load_k_part("),
    piece("template <WeightKind kKind, int kR>\n__global__ void matmul_k_kernel("),
    piece("template <WeightKind kKind>\nstruct KPrefillStage {", "\n};\n"),
    piece("__device__ __forceinline__ int k_prefill_block("),
    piece("template <WeightKind kKind>\n__global__ void __launch_bounds__(kKPrefillThreads)\n"
          "    matmul_k_prefill_kernel("),
    piece("template <WeightKind kKind>\nstruct KLaneWords;", ";\n"),
    piece("template <>\nstruct KLaneWords<WeightKind::kQ4_K> {", "\n};\n"),
    piece("template <>\nstruct KLaneWords<WeightKind::kQ6_K> {", "\n};\n"),
    piece("template <WeightKind kKind, int kTiles>\n"
          "__global__ void __launch_bounds__(kKMmaThreads)\n    matmul_k_mma_kernel("),
    piece("struct HalfPrefillStage {", "\n};\n"),
    piece("template <WeightKind kKind, bool kSplit = false>\n"
          "__global__ void __launch_bounds__(kPrefillThreads)\n    matmul_half_prefill_kernel("),
]
# Attention: everything from the block reduction to the grouped kernel.
attention_start = "template <bool kMax>\n__device__ float attention_block_reduce("
attention_end = "// Tiled attention:"
if attention_start not in source or attention_end not in source:
    sys.exit("extract_kernels.py: the attention kernels moved: update extract_kernels.py")
pieces.append(source[source.index(attention_start):source.index(attention_end)])

# The constants they use, as kernels.cu defines them.
constants = []
for name in ("kWarp", "kSumMagicBits", "kSum16MagicBits", "kMmaRows", "kMmaWarps", "kMmaMaxTiles", "kStreamWarps",
             "kStreamChains", "kStreamStages", "kSplitTileRows", "kSplitRows", "kSplitGroups", "kPrefillRows", "kPrefillCols", "kPrefillWarps",
             "kPrefillThreads", "kPrefillStages", "kPrefillGroups", "kPrefillGroupedStages", "kPrefillTileStride",
             "kPrefillTileFloats", "kHalfPrefillStages", "kKPrefillRows",
             "kKPrefillCols", "kKPrefillWarps", "kKPrefillThreads", "kKMmaRows", "kKMmaWarps",
             "kKMmaThreads", "kMatmulWarps", "kGemvThreads", "kGemvPrefetch", "kPairedThreads",
             "kPairedPrefetch", "kGatedOutputs", "kGatedThreads", "kGatedPrefetch",
             "kAttnThreads", "kAttnKeys", "kMaxHeadDim", "kNormThreads", "kNormBlock",
             "kWideNormPerThread", "kSuperBlockWarps"):
    match = re.search(r"^constexpr int " + name + r" = [^;]*;", source, re.M)
    if not match:
        sys.exit(f"extract_kernels.py: no constexpr {name} in {sys.argv[1]}")
    constants.append(match.group(0))

text = "\n".join(pieces)
text = re.sub(r"__global__ void __launch_bounds__\([^\n]*\)\n\s*", "void ", text)
text = text.replace("__global__ void ", "void ")
text = text.replace("// One activation tile: registers for two blocks per SM (the decode step).\n", "")
text = text.replace("__device__ __forceinline__ ", "")
text = text.replace("__device__ ", "")
# An empty statement: a kernel may wait in one of two places.
text = text.replace("begin_kernel();", "{}")
# The early weight requests run (as no-ops) wherever a kernel would make them.
text = text.replace("__constant__ bool weights_early_wanted;", "inline bool weights_early_wanted = true;")
text = text.replace("__constant__ bool operands_early_wanted;", "inline bool operands_early_wanted = false;")
# Unrolling is code generation only; a constant named there stays used.
text = re.sub(r"^(\s*)#pragma unroll ([A-Za-z_]\w*)\s*\n", r"\1(void)\2;\n", text, flags=re.M)
text = re.sub(r"^\s*#pragma unroll.*\n", "", text, flags=re.M)
text = text.replace("extern __shared__ int4 gemv_shared[];", "int4* gemv_shared = dynamic_shared<int4>();")
text = text.replace("extern __shared__ int4 stream_shared[];", "int4* stream_shared = dynamic_shared<int4>();")
text = text.replace("extern __shared__ int4 prefill_shared[];", "int4* prefill_shared = dynamic_shared<int4>();")
text = text.replace("extern __shared__ float prestaged_shared[];",
                    "float* prestaged_shared = dynamic_shared<float>();")
text = text.replace("__shared__ float values_s[kGatedOutputs];", "float* values_s = static_shared<float>();")
text = text.replace("__shared__ float tile_s[kMmaRows];", "float* tile_s = static_shared<float>();")
text = text.replace("__shared__ float partial_s[kMmaWarps][kMmaRows][8 * kTiles];",
                    "auto& partial_s = *static_shared<float[kMmaWarps][kMmaRows][8 * kTiles]>();")


def shared_declaration(match):
    """__shared__ T a[N], b[M][K], c; as references to the block's arrays of
    those declarations (one per source line and name)."""
    indent, type_name, declarators = match.group(1), match.group(2), match.group(3)
    out = []
    for d in re.split(r",\s*(?![^\[]*\])", declarators):
        name = re.match(r"\w+", d).group(0)
        dims = d[len(name):]
        out.append(f'{indent}auto& {name} = *shared_array<{type_name}{dims}>(__LINE__, "{name}");')
    return "\n".join(out)


text = re.sub(r"^(\s*)__shared__ (\w+) ([^;]+);", shared_declaration, text, flags=re.M)
if "__shared__" in text or "__global__" in text:
    sys.exit("extract_kernels.py: a CUDA keyword is left; teach it the new one")

with open(sys.argv[2], "w") as out:
    out.write("// Generated by tests/cuda_emulation/extract_kernels.py from src/cuda/kernels.cu.\n")
    out.write("#pragma once\n#include \"cuda_on_cpu.h\"\n\nnamespace parspec::cuda::emulated {\n\n")
    out.write("\n".join(constants) + "\n\n" + text + "\n}  // namespace parspec::cuda::emulated\n")
