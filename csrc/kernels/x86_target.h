#pragma once
// The multi-row kernels are x86 code in two flavours, AVX2 (the wheel's own
// baseline) and AVX512-VNNI, compiled per function with target attributes
// (GCC/Clang) and chosen at run time; elsewhere they are absent.
#ifndef GGSPEC_X86_KERNEL
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GGSPEC_X86_KERNEL 1
#else
#define GGSPEC_X86_KERNEL 0
#endif
#endif

#if GGSPEC_X86_KERNEL
#include <immintrin.h>
#define GGSPEC_AVX2 __attribute__((target("avx2,fma,f16c")))
#define GGSPEC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#endif
