#include "kernels/isa.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace parspec {

namespace {

Isa best_supported() {
  if (cpu_supports(Isa::kAvx512)) return Isa::kAvx512;
  if (cpu_supports(Isa::kAvxVnni)) return Isa::kAvxVnni;
  return Isa::kAvx2;
}

Isa isa_from_environment() {
  const char* name = std::getenv("PARSPEC_ISA");
  if (name != nullptr && *name != '\0') {
    for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
      if (std::strcmp(name, isa_name(isa)) != 0) continue;
      check(cpu_supports(isa), "PARSPEC_ISA=", name, ": this CPU lacks ", name);
      return isa;
    }
    fail("PARSPEC_ISA=", name, " is not one of avx2, avxvnni, avx512");
  }
  const char* no_vnni = std::getenv("PARSPEC_NO_VNNI");
  if (no_vnni != nullptr && *no_vnni != '\0' && std::strcmp(no_vnni, "0") != 0) return Isa::kAvx2;
  return best_supported();
}

Isa& chosen() {
  static Isa isa = isa_from_environment();
  return isa;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvxVnni:
      return "avxvnni";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

bool cpu_supports(Isa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kAvx2:
      return true;  // cpu_check refuses to start without it
    case Isa::kAvxVnni:
      return __builtin_cpu_supports("avxvnni");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

Isa active_isa() {
  return chosen();
}

bool set_active_isa(Isa isa) {
  if (!cpu_supports(isa)) return false;
  chosen() = isa;
  return true;
}

bool decode_prefetch_nta() {
  // Asked once per group of 16 weight rows: the CPU is read once per process.
  static const bool amd = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return amd;
}

std::string isa_report() {
  std::string s = std::string(isa_name(active_isa())) + " (CPU has:";
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512})
    if (cpu_supports(isa)) s += std::string(" ") + isa_name(isa);
  return s + "; override with PARSPEC_ISA)";
}

}  // namespace parspec
