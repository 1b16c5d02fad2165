#pragma once
// Which instruction set the kernels use, chosen once per process at run time:
// the best one the CPU has, or the one PARSPEC_ISA names (avx2 | avxvnni |
// avx512). Every path computes bit-identical results (exact integer sums, the
// same float operations per output in the same order), so the choice changes
// speed only.
//
//   avx2     AVX2 + FMA + F16C: every kernel (the build's baseline).
//   avxvnni  AVX-VNNI (vpdpbusd on 256 bits) for the Q8_0/Q4_0/Q4_K/Q6_K integer
//            dot products (8-row tiles).
//   avx512   AVX-512 F/BW/VL/VNNI: Q8_0/Q4_0/Q4_K/Q6_K tiles of 16 weight rows in
//            512-bit registers, several activation rows' sums in registers (Q8_0/Q4_0:
//            32 rows for batches of more than 8); F32/F16/BF16 with each output's
//            16-lane accumulator in one register; attention with 16 queries per register.
#include <string>

namespace parspec {

enum class Isa { kAvx2, kAvxVnni, kAvx512 };

const char* isa_name(Isa isa);

// Whether this CPU (and OS) can run the kernels of `isa`.
bool cpu_supports(Isa isa);

// The kernels in use. On first call: PARSPEC_ISA if set (an unknown name, or an
// ISA this CPU lacks, is a parspec::Error), else the deprecated
// PARSPEC_NO_VNNI=1 (same as PARSPEC_ISA=avx2), else the best supported.
Isa active_isa();

// Switches the kernels (tests and benchmarks; never while a matmul runs).
// Returns false and changes nothing where the CPU lacks `isa`.
bool set_active_isa(Isa isa);

// Whether the AVX-512 decode kernels (one activation row, repacked Q4_0/Q8_0
// weights) prefetch with the non-temporal hint instead of T0: on AMD CPUs. On
// Zen 5 it made 1B decode faster (median +6%); on an Intel Xeon with AVX-512
// and AMX the same kernel ran 2.5x slower with it than with T0 (1B Q8_0,
// L(1) 182 against 73 ms), as NTA lines there skip L2 and are gone before use.
bool decode_prefetch_nta();

// One line for `info` / `bench-forward`: the ISA in use and what the CPU has.
std::string isa_report();

}  // namespace parspec
